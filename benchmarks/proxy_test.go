package benchmarks

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingProxy forwards TCP connections to a Redis and counts the
// commands clients send through it, as the client sends them: a script's
// own redis.call()s, which INFO commandstats also counts, are not counted.
// It can also show a test the commands themselves (see watch).
type countingProxy struct {
	ln       net.Listener
	target   string
	commands atomic.Int64
	watcher  atomic.Pointer[func(args [][]byte)]

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// startCountingProxy listens on a free port of 127.0.0.1 and stops, closing
// every connection, when the test ends.
func startCountingProxy(t testing.TB, target string) *countingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &countingProxy{ln: ln, target: target, conns: make(map[net.Conn]struct{})}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

func (p *countingProxy) Addr() string { return p.ln.Addr().String() }

// settled returns the count once it has stopped moving: a command is
// counted after it is forwarded, so its reply can reach the client first.
func (p *countingProxy) settled() int64 {
	n := p.commands.Load()
	for {
		time.Sleep(20 * time.Millisecond)
		m := p.commands.Load()
		if m == n {
			return n
		}
		n = m
	}
}

// watch has the proxy pass each command it reads from now on, as its
// arguments (copies f may keep), to f, until stop is called. Like the
// count, f sees a command once it has been forwarded, possibly after its
// reply reached the client, so a command sent just before watch may be
// passed too: call settled first to leave those out. f is called from the
// proxy's goroutines, one per connection, so concurrently.
func (p *countingProxy) watch(f func(args [][]byte)) (stop func()) {
	p.watcher.Store(&f)
	return func() { p.watcher.Store(nil) }
}

func (p *countingProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *countingProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *countingProxy) accept() {
	defer func() {
		p.mu.Lock()
		p.conns = nil // no more tracking: close has run or is running
		p.mu.Unlock()
	}()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		if !p.track(client, server) {
			client.Close()
			server.Close()
			return
		}
		p.wg.Go(func() {
			io.Copy(client, server)
			client.Close()
		})
		p.wg.Go(func() {
			p.count(io.TeeReader(client, server))
			server.Close()
		})
	}
}

// count reads the client's side of a connection, already forwarded by the
// TeeReader, and counts its commands: RESP arrays of bulk strings, or
// inline commands, one per line. It reads their arguments only while a
// test watches.
func (p *countingProxy) count(r io.Reader) {
	br := bufio.NewReader(r)
	for {
		// The watcher is read once a command has begun to arrive, not
		// while waiting for one, which may start before watch is called.
		_, err := br.Peek(1)
		f := p.watcher.Load()
		var args [][]byte
		if err == nil {
			args, err = readCommand(br, f != nil)
		}
		if err != nil {
			io.Copy(io.Discard, br) // keep forwarding whatever follows
			return
		}
		p.commands.Add(1)
		if f != nil {
			(*f)(args)
		}
	}
}

var errRESP = errors.New("proxy: not a RESP command")

// readCommand reads one command from br, and returns its arguments if
// keep is true, or skips it.
func readCommand(br *bufio.Reader, keep bool) ([][]byte, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return nil, err
	}
	if line[0] != '*' { // an inline command
		if !keep {
			return nil, nil
		}
		var args [][]byte
		for _, f := range bytes.Fields(line) {
			args = append(args, bytes.Clone(f))
		}
		return args, nil
	}
	if len(line) < 4 {
		return nil, errRESP
	}
	n, err := strconv.Atoi(string(line[1 : len(line)-2]))
	if err != nil {
		return nil, errRESP
	}
	var args [][]byte
	for range n {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return nil, err
		}
		if len(line) < 4 || line[0] != '$' {
			return nil, errRESP
		}
		size, err := strconv.Atoi(string(line[1 : len(line)-2]))
		if err != nil || size < 0 {
			return nil, errRESP
		}
		if !keep {
			if _, err := br.Discard(size + 2); err != nil {
				return nil, err
			}
			continue
		}
		arg := make([]byte, size+2)
		if _, err := io.ReadFull(br, arg); err != nil {
			return nil, err
		}
		args = append(args, arg[:size])
	}
	return args, nil
}
