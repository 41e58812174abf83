package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/url"
	"runtime"
	"strconv"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The flow-control windows the load generator grants a server: its
// connection's and each stream's. A response never waits for a window
// update: the connection's is renewed when half of it has been used,
// and a stream's (one response each) when half of it has.
const (
	recvConnWindow   = 1 << 24
	recvStreamWindow = 1 << 20
	// The HTTP/2 defaults a server's SETTINGS may change (RFC 9113,
	// section 6.5.2).
	initialWindow      = 65535
	initialMaxFrame    = 16384
	initialHeaderTable = 4096
	// maxStreamID is the last stream a client may open (its IDs are odd
	// and 31 bits long): a connection carries 2^30 calls.
	maxStreamID = 1<<31 - 1
)

// conn is one HTTP/2 connection carrying ShouldRateLimit calls in gRPC's
// wire format: the load generator's own client, in place of grpc-go's,
// whose per-call goroutines, allocations and frame writes cost the load
// generator as much CPU a decision as sluice-serve spends answering it,
// on the cores the servers measured share. It keeps no goroutine per
// call: a caller adds its request's frames to the connection's pending
// bytes itself; one writer goroutine writes whatever is pending in one
// system call, so that the requests made while it writes go out
// together in the next; and one reader goroutine hands each answer to
// its caller.
//
// It speaks what a unary call needs, and HTTP/2's obligations: settings
// acknowledged, pings answered, both sides' flow control kept. It does
// not compress, send deadlines or metadata, or reconnect: a connection
// that fails fails its calls, and every later one, as does one that has
// carried the 2^30 calls HTTP/2 allows it (about 20 hours at 15,000
// calls a second).
type conn struct {
	nc   net.Conn
	fr   *http2.Framer // written under wmu; read by the reader alone
	done chan struct{} // closed when the reader and the writer have returned

	wmu sync.Mutex // guards what follows, the writing side
	// pending holds the frames written and not yet sent; the framer's
	// writes append to it, and the writer takes it when it is not empty.
	pending []byte
	flush   sync.Cond // signalled when pending fills or broken is set
	// headers is the next call's request headers, HPACK-encoded: the
	// first call's, and then later's (see requestHeaders).
	headers, later []byte
	// nextID is the next stream's ID: streams must be opened in the
	// order of their IDs, so it is taken under wmu, as the frames are
	// written.
	nextID uint32
	// sendWindow is what the connection's flow control lets this side
	// send; streamWindow and maxFrame are the server's settings.
	sendWindow, streamWindow, maxFrame int
	// windowed is signalled when sendWindow grows or broken is set.
	windowed sync.Cond
	// broken is set once the connection has failed: nothing more is
	// written.
	broken bool

	mu    sync.Mutex       // guards calls and err
	calls map[uint32]*call // the streams awaiting an answer
	err   error            // why the connection failed, or nil

	// The reader's own state, unshared.
	dec       *hpack.Decoder
	block     headerBlock // the header block being read
	recvAcked int         // connection window consumed and not yet renewed
}

// call is one worker's call in flight, and the answer the reader gives
// it: reused from one call to the next.
type call struct {
	done chan struct{} // the reader's signal that the answer is in: buffered, 1
	id   uint32
	// Written by the reader while the call is in conn.calls (under
	// conn.mu), read by the caller once done is received.
	body    []byte // the response's DATA: gRPC's length-prefixed message
	started bool   // the response's headers arrived
	recv    int    // stream window consumed and not yet renewed
	err     error  // the call's failure, or nil
}

// headerBlock is what the reader keeps of one HEADERS frame and its
// CONTINUATIONs while it decodes them.
type headerBlock struct {
	stream  uint32
	end     bool // the block ends the stream: trailers
	status  string
	grpc    string // grpc-status
	message string // grpc-message
}

// dial connects to addr, exchanges HTTP/2 settings with the server, and
// starts the connection's reader and writer. ctx bounds the connecting
// and the exchange. streams is how many calls the connection will carry
// at once, which the server must allow.
func dial(ctx context.Context, addr string, streams int) (*conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if deadline, ok := ctx.Deadline(); ok {
		nc.SetDeadline(deadline)
	}
	c := &conn{
		nc:           nc,
		done:         make(chan struct{}),
		nextID:       1,
		sendWindow:   initialWindow,
		streamWindow: initialWindow,
		maxFrame:     initialMaxFrame,
		calls:        make(map[uint32]*call, streams),
	}
	c.windowed.L = &c.wmu
	c.flush.L = &c.wmu
	c.fr = http2.NewFramer(pendingWriter{c}, bufio.NewReaderSize(nc, 32<<10))
	c.fr.SetReuseFrames()
	c.dec = hpack.NewDecoder(4096, c.emit)
	c.dec.SetMaxStringLength(16 << 10)

	fail := func(err error) (*conn, error) {
		nc.Close()
		return nil, err
	}
	// The preface, this side's settings and a connection window for the
	// answers, then the server's settings, which must come first.
	c.pending = append(c.pending, http2.ClientPreface...)
	c.fr.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: recvStreamWindow})
	c.fr.WriteWindowUpdate(0, recvConnWindow-initialWindow)
	if _, err := nc.Write(c.pending); err != nil {
		return fail(err)
	}
	c.pending = c.pending[:0]
	f, err := c.fr.ReadFrame()
	if err != nil {
		return fail(err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		return fail(fmt.Errorf("not an HTTP/2 server: its first frame is %v, not SETTINGS", f.Header().Type))
	}
	c.settings(sf)
	table, ok := sf.Value(http2.SettingHeaderTableSize)
	if !ok {
		table = initialHeaderTable
	}
	c.headers, c.later = requestHeaders(addr, table)
	if _, err := nc.Write(c.pending); err != nil {
		return fail(err)
	}
	c.pending = c.pending[:0]
	if n, ok := sf.Value(http2.SettingMaxConcurrentStreams); ok && int64(n) < int64(streams) {
		return fail(fmt.Errorf("the server allows %d streams on a connection and this one would carry %d: use more connections", n, streams))
	}
	nc.SetDeadline(time.Time{})
	var wg sync.WaitGroup
	wg.Go(c.read)
	wg.Go(c.write)
	go func() {
		wg.Wait()
		close(c.done)
	}()
	return c, nil
}

// pendingWriter is where the framer writes: the connection's pending
// bytes, under wmu.
type pendingWriter struct{ c *conn }

func (w pendingWriter) Write(b []byte) (int, error) {
	c := w.c
	if len(c.pending) == 0 {
		c.flush.Signal()
	}
	c.pending = append(c.pending, b...)
	return len(b), nil
}

// requestHeaders returns a ShouldRateLimit call's request headers for
// authority addr as HPACK blocks: the first call's, which adds the fields
// to the server's table, and every later call's, which names each by its
// index there, as Envoy's calls do after their first; so the server
// decodes no string after a connection's first call. If the server's
// table (of table bytes) is smaller than HPACK's default, both blocks
// hold the fields as literals, never indexed.
func requestHeaders(addr string, table uint32) (first, later []byte) {
	fields := [][2]string{
		{":method", "POST"},
		{":scheme", "http"},
		{":path", "/" + rlsv3.RateLimitService_ServiceDesc.ServiceName + "/ShouldRateLimit"},
		{":authority", addr},
		{"content-type", "application/grpc"},
		{"te", "trailers"},
		{"user-agent", "sluice-loadgen"},
	}
	block := func(enc *hpack.Encoder, b *bytes.Buffer) []byte {
		b.Reset()
		for _, f := range fields {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1], Sensitive: table < initialHeaderTable})
		}
		return bytes.Clone(b.Bytes())
	}
	var b bytes.Buffer
	enc := hpack.NewEncoder(&b)
	return block(enc, &b), block(enc, &b)
}

// settings applies the server's settings and acknowledges them.
func (c *conn) settings(sf *http2.SettingsFrame) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	sf.ForeachSetting(func(s http2.Setting) error {
		switch s.ID {
		case http2.SettingInitialWindowSize:
			c.streamWindow = int(s.Val)
		case http2.SettingMaxFrameSize:
			c.maxFrame = int(s.Val)
		}
		return nil
	})
	c.fr.WriteSettingsAck()
}

// newCall returns a call to reuse from one RPC to the next.
func newCall() *call { return &call{done: make(chan struct{}, 1)} }

// invoke sends msg, a request in gRPC's length-prefixed form, as a
// ShouldRateLimit call, and returns the response's message (without its
// prefix): cl's, valid until cl's next call. If ctx ends first, the
// stream is reset and ctx's error returned, as a gRPC status.
func (c *conn) invoke(ctx context.Context, msg []byte, cl *call) ([]byte, error) {
	cl.body, cl.started, cl.recv, cl.err = cl.body[:0], false, 0, nil
	if err := c.send(msg, cl); err != nil {
		return nil, err
	}
	select {
	case <-cl.done:
	case <-ctx.Done():
		c.mu.Lock()
		_, waiting := c.calls[cl.id]
		delete(c.calls, cl.id)
		c.mu.Unlock()
		if !waiting {
			<-cl.done // answered meanwhile: take the signal, so that cl starts afresh
		}
		c.wmu.Lock()
		if !c.broken {
			c.fr.WriteRSTStream(cl.id, http2.ErrCodeCancel)
		}
		c.wmu.Unlock()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if cl.err != nil {
		return nil, cl.err
	}
	return message(cl.body)
}

// send opens a stream for cl and adds msg's frames to those pending.
// An error means cl was not sent; once it is, its answer or its failure
// comes to cl.done.
func (c *conn) send(msg []byte, cl *call) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if len(msg) > c.streamWindow {
		return status.Errorf(codes.ResourceExhausted, "loadgen: a request of %d bytes exceeds the server's stream window of %d", len(msg), c.streamWindow)
	}
	for c.sendWindow < len(msg) && !c.broken {
		c.windowed.Wait()
	}
	if c.nextID > maxStreamID {
		return status.Errorf(codes.Unavailable, "loadgen: the connection has opened the %d streams HTTP/2 allows a client", maxStreamID/2+1)
	}
	cl.id = c.nextID
	c.mu.Lock()
	err := c.err
	if err == nil {
		c.nextID += 2
		c.calls[cl.id] = cl
	}
	c.mu.Unlock()
	if err != nil {
		return err
	}
	c.sendWindow -= len(msg)
	// The framer's writes append to pending, and cannot fail.
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: cl.id, BlockFragment: c.headers, EndHeaders: true})
	c.headers = c.later
	for rest := msg; ; {
		n := min(len(rest), c.maxFrame)
		c.fr.WriteData(cl.id, n == len(rest), rest[:n])
		if rest = rest[n:]; len(rest) == 0 {
			break
		}
	}
	return nil
}

// write sends the pending frames, all that have gathered since its last
// write in one, until the connection fails or closes.
func (c *conn) write() {
	var out []byte
	for {
		c.wmu.Lock()
		for len(c.pending) == 0 && !c.broken {
			c.flush.Wait()
			// Let the callers the reader has just answered add their
			// next requests, to go out in this write: with a yield
			// here, a write carries about 7 requests at 64 streams,
			// without, 1.2, and the system calls took half the load
			// generator's CPU.
			c.wmu.Unlock()
			runtime.Gosched()
			c.wmu.Lock()
		}
		if c.broken {
			c.wmu.Unlock()
			return
		}
		out, c.pending = c.pending, out[:0]
		c.wmu.Unlock()
		if _, err := c.nc.Write(out); err != nil {
			// The connection is done for, and its calls fail; closing it
			// ends the reader too.
			c.fail(status.Errorf(codes.Unavailable, "loadgen: writing to the server: %v", err))
			c.nc.Close()
			return
		}
	}
}

// message returns the message in body, a response's DATA: one gRPC
// length-prefixed message, uncompressed.
func message(body []byte) ([]byte, error) {
	if len(body) < 5 {
		return nil, status.Errorf(codes.Internal, "loadgen: a response of %d bytes, not a gRPC message", len(body))
	}
	if body[0] != 0 {
		return nil, status.Errorf(codes.Internal, "loadgen: a compressed response (flag %d), which was not asked for", body[0])
	}
	if n := binary.BigEndian.Uint32(body[1:5]); int64(n) != int64(len(body)-5) {
		return nil, status.Errorf(codes.Internal, "loadgen: a response of %d bytes whose prefix says %d", len(body)-5, n)
	}
	return body[5:], nil
}

// Close closes the connection and waits for its reader and writer to
// return. Calls still waiting fail.
func (c *conn) Close() error {
	err := c.nc.Close()
	<-c.done
	return err
}

// fail fails every call waiting and every later one with err, unless the
// connection has failed before.
func (c *conn) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
	}
	for id, cl := range c.calls {
		cl.err = c.err
		delete(c.calls, id)
		cl.done <- struct{}{}
	}
}

// read reads the server's frames until the connection fails or closes,
// and then fails its calls and stops its writer.
func (c *conn) read() {
	err := c.readFrames()
	c.fail(status.Errorf(codes.Unavailable, "loadgen: the connection to the server failed: %v", err))
	c.wmu.Lock()
	c.broken = true
	c.windowed.Broadcast()
	c.flush.Broadcast()
	c.wmu.Unlock()
	c.nc.Close()
}

// readFrames handles the server's frames, and returns the error that
// ended them.
func (c *conn) readFrames() error {
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return err
		}
		switch f := f.(type) {
		case *http2.DataFrame:
			c.data(f)
		case *http2.HeadersFrame:
			c.block = headerBlock{stream: f.StreamID, end: f.StreamEnded()}
			if err := c.fragment(f.HeaderBlockFragment(), f.HeadersEnded()); err != nil {
				return err
			}
		case *http2.ContinuationFrame:
			if err := c.fragment(f.HeaderBlockFragment(), f.HeadersEnded()); err != nil {
				return err
			}
		case *http2.RSTStreamFrame:
			c.finish(f.StreamID, status.Errorf(codes.Unavailable, "loadgen: the server reset the stream: %v", f.ErrCode))
		case *http2.SettingsFrame:
			if !f.IsAck() {
				c.settings(f)
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				c.reply(func() { c.fr.WritePing(true, f.Data) })
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				c.wmu.Lock()
				c.sendWindow += int(f.Increment)
				c.windowed.Broadcast()
				c.wmu.Unlock()
			}
		case *http2.GoAwayFrame:
			// Streams up to LastStreamID will be answered; no later
			// stream is taken.
			c.mu.Lock()
			if c.err == nil {
				c.err = status.Errorf(codes.Unavailable, "loadgen: the server is going away: %v %q", f.ErrCode, f.DebugData())
			}
			for id, cl := range c.calls {
				if id > f.LastStreamID {
					cl.err = c.err
					delete(c.calls, id)
					cl.done <- struct{}{}
				}
			}
			c.mu.Unlock()
		}
	}
}

// reply writes a frame the protocol owes the server.
func (c *conn) reply(write func()) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	write()
}

// data adds a DATA frame to its call's response, renews the windows its
// bytes used, and ends the call if the frame ends its stream.
func (c *conn) data(f *http2.DataFrame) {
	n := int(f.Header().Length)
	if c.recvAcked += n; c.recvAcked >= recvConnWindow/2 {
		grant := uint32(c.recvAcked)
		c.recvAcked = 0
		c.reply(func() { c.fr.WriteWindowUpdate(0, grant) })
	}
	var renew uint32
	c.mu.Lock()
	cl := c.calls[f.StreamID]
	if cl != nil {
		cl.body = append(cl.body, f.Data()...)
		if cl.recv += n; cl.recv >= recvStreamWindow/2 && !f.StreamEnded() {
			renew, cl.recv = uint32(cl.recv), 0
		}
	}
	c.mu.Unlock()
	if renew > 0 {
		c.reply(func() { c.fr.WriteWindowUpdate(f.StreamID, renew) })
	}
	if f.StreamEnded() {
		// A stream ends with trailers; DATA that ends it has none.
		c.finish(f.StreamID, status.Error(codes.Internal, "loadgen: the response ended without a gRPC status"))
	}
}

// fragment decodes part of a header block, and the block's fields once
// it ends.
func (c *conn) fragment(b []byte, ended bool) error {
	if _, err := c.dec.Write(b); err != nil {
		return fmt.Errorf("decoding the server's headers: %w", err)
	}
	if !ended {
		return nil
	}
	if err := c.dec.Close(); err != nil {
		return fmt.Errorf("decoding the server's headers: %w", err)
	}
	c.headersEnded()
	return nil
}

// emit keeps the fields of a header block that a call's answer needs.
func (c *conn) emit(f hpack.HeaderField) {
	switch f.Name {
	case ":status":
		c.block.status = f.Value
	case "grpc-status":
		c.block.grpc = f.Value
	case "grpc-message":
		c.block.message = f.Value
	}
}

// headersEnded acts on a whole header block: the response's headers,
// which must say 200, or its trailers, whose status ends the call.
func (c *conn) headersEnded() {
	b := &c.block
	c.mu.Lock()
	cl := c.calls[b.stream]
	first := cl != nil && !cl.started
	if cl != nil {
		cl.started = true
	}
	c.mu.Unlock()
	if cl == nil {
		return
	}
	if first && b.status != "200" {
		c.finish(b.stream, status.Errorf(codes.Unknown, "loadgen: HTTP status %q from the server", b.status))
		return
	}
	if !b.end {
		return
	}
	switch {
	case b.grpc == "0":
		c.finish(b.stream, nil)
	case b.grpc == "":
		c.finish(b.stream, status.Error(codes.Internal, "loadgen: the response's trailers hold no grpc-status"))
	default:
		code, err := strconv.ParseUint(b.grpc, 10, 32)
		if err != nil {
			c.finish(b.stream, status.Errorf(codes.Internal, "loadgen: a grpc-status of %q", b.grpc))
			return
		}
		msg, err := url.PathUnescape(b.message)
		if err != nil {
			msg = b.message
		}
		c.finish(b.stream, status.Error(codes.Code(code), msg))
	}
}

// finish ends stream id's call, if it is still waiting, with err.
func (c *conn) finish(id uint32, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := c.calls[id]
	if cl == nil {
		return
	}
	delete(c.calls, id)
	cl.err = err
	cl.done <- struct{}{}
}
