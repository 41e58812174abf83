package redistest

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// proxyChunk is the largest read a proxy forwards at once.
const proxyChunk = 32 << 10

// proxyQueue bounds the chunks a proxy holds per direction of a
// connection while it delays or blackholes them; once it is full the proxy
// stops reading, and the kernel's buffers, then the sender, wait.
const proxyQueue = 64

// Proxy is a TCP proxy in front of one server, for fault tests: it passes
// bytes through, delays the server's replies ([Proxy.Delay]), or
// blackholes every connection ([Proxy.Blackhole]): it accepts and reads,
// and forwards nothing in either direction until [Proxy.Pass]. Its target
// can change ([Proxy.SetTarget]), as an address repointed at a new primary
// does. Make one with [NewProxy]. Its methods are safe for concurrent use.
//
// A connection accepted by the proxy dials the target at once; if that
// fails (the server is down), the proxy closes the client's connection.
// Each direction of a connection is a reader and a writer goroutine with a
// bounded queue between them, so a delay adds latency, not a bandwidth
// limit: chunks read 1 ms apart leave 1 ms apart.
type Proxy struct {
	ln net.Listener

	mu        sync.Mutex
	target    string // where connections accepted from now on go
	blackhole bool
	delay     time.Duration
	changed   chan struct{} // closed and replaced when blackhole changes
	conns     map[net.Conn]struct{}
	closed    bool

	accepted atomic.Int64 // connections accepted so far

	done chan struct{} // closed by Close
	wg   sync.WaitGroup
}

// NewProxy starts a proxy on a free port of 127.0.0.1 that forwards to
// target, a "host:port". It passes bytes through until told otherwise.
// t.Cleanup closes it, with every connection and goroutine it started.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := newProxy(target)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(p.Close)
	return p
}

func newProxy(target string) (*Proxy, error) {
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		if ln.Addr().(*net.TCPAddr).Port == systemPort {
			ln.Close()
			continue
		}
		p := &Proxy{
			ln:      ln,
			target:  target,
			changed: make(chan struct{}),
			conns:   make(map[net.Conn]struct{}),
			done:    make(chan struct{}),
		}
		p.wg.Add(1)
		go p.accept()
		return p, nil
	}
	return nil, errors.New("redistest: proxy found no free port")
}

// Accepted returns how many connections the proxy has accepted: a client
// that closed its connections and dialled again shows here.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// Addr returns the address clients dial, "127.0.0.1:PORT".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address the proxy forwards new connections to.
func (p *Proxy) Target() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.target
}

// SetTarget sends the connections the proxy accepts from now on to
// target, a "host:port", as a DNS name or a Kubernetes Service repointed
// at a new primary does. The connections already open stay
// with the server they reached until either side closes them: a client
// that keeps its connections keeps talking to the old server, which is
// what a failover by repointing an address leaves behind.
func (p *Proxy) SetTarget(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
}

// Pass forwards bytes again, ending a blackhole and a delay. Chunks held
// while the proxy blackholed are forwarded now, in order, as a network
// that heals delivers what it held; so is a chunk whose delay was running
// when the blackhole began. A chunk read during a delay and not
// blackholed since keeps its delay (see [Proxy.Delay]), and the replies
// after it on its connection wait behind it: to end a long delay at
// once, open new connections.
func (p *Proxy) Pass() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = 0
	p.setBlackhole(false)
}

// Blackhole stops forwarding in both directions, on new connections and
// on the connections already open: the proxy still accepts and reads, so
// a client's writes succeed, but no request reaches the server and no
// reply the server sends reaches the client, until [Proxy.Pass].
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setBlackhole(true)
}

// setBlackhole sets the mode and wakes the writers. Called with p.mu held.
func (p *Proxy) setBlackhole(on bool) {
	if p.blackhole == on {
		return
	}
	p.blackhole = on
	close(p.changed)
	p.changed = make(chan struct{})
}

// Delay holds every chunk the server sends for d after the proxy read it,
// so each reply reaches its client d later: a round trip gains d. Requests
// are not delayed. A delay applies to the chunks read after the call;
// Delay(0) ends it. A negative d counts as 0.
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = max(d, 0)
}

// Close stops the proxy: it closes the listener and every connection, and
// waits for its goroutines to return. Close is idempotent.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.done)
	p.ln.Close()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.accepted.Add(1)
		p.wg.Add(1)
		go p.serve(c)
	}
}

// track adds c to the open connections, or closes it if the proxy is
// closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

// serve dials the target for client and forwards between them until
// either side closes or the proxy does.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	if !p.track(client) {
		return
	}
	defer p.untrack(client)
	server, err := net.DialTimeout("tcp", p.Target(), dialTimeout)
	if err != nil {
		return
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)
	var wg sync.WaitGroup
	wg.Go(func() { p.pump(client, server, false) })
	wg.Go(func() { p.pump(server, client, true) })
	wg.Wait()
}

type chunk struct {
	b  []byte
	at time.Time // when it may be written
}

// pump copies from src to dst through a queue, delaying chunks when
// delayed (the server's direction) and holding them while the proxy
// blackholes. When either side fails it closes both, which ends the other
// direction too.
func (p *Proxy) pump(src, dst net.Conn, delayed bool) {
	q := make(chan chunk, proxyQueue)
	quit := make(chan struct{}) // closed when the writer returns
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		defer close(quit)
		defer src.Close()
		defer dst.Close()
		for c := range q {
			if !p.hold(c.at) {
				return
			}
			if _, err := dst.Write(c.b); err != nil {
				return
			}
		}
	})
	defer close(q)
	buf := make([]byte, proxyChunk)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			// A copy of what was read, so that the buffer is read into
			// again at once: chunks are small, the buffer is not.
			c := chunk{b: append([]byte(nil), buf[:n]...), at: time.Now()}
			if delayed {
				p.mu.Lock()
				c.at = c.at.Add(p.delay)
				p.mu.Unlock()
			}
			select {
			case q <- c:
			case <-quit:
				return
			case <-p.done:
				return
			}
		}
		if err != nil {
			// Let the writer drain what was read, then close both.
			return
		}
	}
}

// hold waits until at and until the proxy is not blackholing. It reports
// false if the proxy closed meanwhile.
func (p *Proxy) hold(at time.Time) bool {
	for {
		p.mu.Lock()
		bh, changed := p.blackhole, p.changed
		p.mu.Unlock()
		if !bh {
			break
		}
		select {
		case <-changed:
		case <-p.done:
			return false
		}
	}
	if d := time.Until(at); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-p.done:
			return false
		}
	}
	// A blackhole that began during the delay holds the chunk too.
	p.mu.Lock()
	bh := p.blackhole
	p.mu.Unlock()
	if bh {
		return p.hold(time.Time{})
	}
	return true
}
