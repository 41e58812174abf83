package redistest

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/redistest/spawn"
)

// rawConn is a connection through a proxy that sends inline PINGs and
// reads their replies within a deadline.
type rawConn struct {
	nc net.Conn
	r  *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{nc: nc, r: bufio.NewReader(nc)}
}

func (c *rawConn) send(t *testing.T, line string) {
	t.Helper()
	c.nc.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(c.nc, line+"\r\n"); err != nil {
		t.Fatalf("write %q: %v", line, err)
	}
}

// read reads one reply line within d.
func (c *rawConn) read(d time.Duration) (string, error) {
	c.nc.SetReadDeadline(time.Now().Add(d))
	s, err := c.r.ReadString('\n')
	return strings.TrimRight(s, "\r\n"), err
}

// ping sends PING and reports its reply and how long it took.
func (c *rawConn) ping(t *testing.T, d time.Duration) (string, time.Duration, error) {
	t.Helper()
	start := time.Now()
	c.send(t, "PING")
	s, err := c.read(d)
	return s, time.Since(start), err
}

func TestProxyPass(t *testing.T) {
	t.Parallel()
	p := NewProxy(t, Shared(t).Addr())
	if p.Addr() == Shared(t).Addr() || p.Target() != Shared(t).Addr() {
		t.Fatalf("Addr() = %s, Target() = %s for a proxy to %s", p.Addr(), p.Target(), Shared(t).Addr())
	}
	for i := range 3 {
		c := dialRaw(t, p.Addr())
		for j := range 3 {
			if s, _, err := c.ping(t, 5*time.Second); err != nil || s != "+PONG" {
				t.Fatalf("connection %d, PING %d = %q, %v; want +PONG", i, j, s, err)
			}
		}
	}
	// A large value crosses in several chunks, in order.
	c := dialRaw(t, p.Addr())
	val := strings.Repeat("0123456789", 20_000)
	c.send(t, "*2\r\n$4\r\nECHO\r\n$"+strconv.Itoa(len(val))+"\r\n"+val) // too long for an inline command
	s, err := c.read(5 * time.Second)
	if err != nil || s != "$200000" {
		t.Fatalf("ECHO: header %q, %v", s, err)
	}
	if s, err := c.read(5 * time.Second); err != nil || s != val {
		t.Fatalf("ECHO: %d bytes back, %v; want the %d sent", len(s), err, len(val))
	}
}

func TestProxyDelay(t *testing.T) {
	t.Parallel()
	p := NewProxy(t, Shared(t).Addr())
	c := dialRaw(t, p.Addr())
	// Long enough that no stall of a loaded machine passes for it.
	const d = 500 * time.Millisecond
	steps := []struct {
		delay    time.Duration
		min, max time.Duration
	}{
		{d, d, d + 5*time.Second},
		{0, 0, d}, // no delay: well under it, even on a loaded machine
	}
	for i, st := range steps {
		p.Delay(st.delay)
		s, took, err := c.ping(t, 5*time.Second)
		if err != nil || s != "+PONG" {
			t.Fatalf("step %d: PING = %q, %v", i, s, err)
		}
		t.Logf("step %d: Delay(%v): PING took %v", i, st.delay, took)
		if took < st.min || took >= st.max {
			t.Errorf("step %d: Delay(%v): PING took %v, want [%v, %v)", i, st.delay, took, st.min, st.max)
		}
	}

	// Delays add latency, not a bandwidth limit: 10 pipelined PINGs take
	// one delay, not ten.
	p.Delay(d)
	start := time.Now()
	c.send(t, strings.Repeat("PING\r\n", 9)+"PING")
	for i := range 10 {
		if s, err := c.read(5 * time.Second); err != nil || s != "+PONG" {
			t.Fatalf("pipelined PING %d = %q, %v", i, s, err)
		}
	}
	if took := time.Since(start); took >= 5*d {
		t.Errorf("10 pipelined PINGs with a %v delay took %v, want about one delay", d, took)
	}
}

func TestProxyBlackhole(t *testing.T) {
	t.Parallel()
	p := NewProxy(t, Shared(t).Addr())
	before := dialRaw(t, p.Addr())
	if s, _, err := before.ping(t, 5*time.Second); err != nil || s != "+PONG" {
		t.Fatalf("PING before the blackhole = %q, %v", s, err)
	}
	p.Blackhole()
	const wait = 200 * time.Millisecond
	// The open connection stalls; a new one is accepted and stalls too.
	after := dialRaw(t, p.Addr())
	for name, c := range map[string]*rawConn{"open connection": before, "new connection": after} {
		s, _, err := c.ping(t, wait)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("%s: PING during the blackhole = %q, %v; want a timeout", name, s, err)
		}
	}
	// Delays do not end a blackhole.
	p.Delay(time.Millisecond)
	if s, _, err := dialRaw(t, p.Addr()).ping(t, wait); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("PING during the blackhole after Delay = %q, %v; want a timeout", s, err)
	}
	// Pass delivers what was held: each stalled PING gets its reply.
	p.Pass()
	for name, c := range map[string]*rawConn{"open connection": before, "new connection": after} {
		if s, err := c.read(5 * time.Second); err != nil || s != "+PONG" {
			t.Errorf("%s: the held PING's reply after Pass = %q, %v", name, s, err)
		}
		if s, _, err := c.ping(t, 5*time.Second); err != nil || s != "+PONG" {
			t.Errorf("%s: PING after Pass = %q, %v", name, s, err)
		}
	}
}

func TestProxyClose(t *testing.T) {
	t.Parallel()
	p := NewProxy(t, Shared(t).Addr())
	c := dialRaw(t, p.Addr())
	if s, _, err := c.ping(t, 5*time.Second); err != nil || s != "+PONG" {
		t.Fatalf("PING = %q, %v", s, err)
	}
	p.Blackhole() // Close must not wait for a held chunk
	c.send(t, "PING")
	done := make(chan struct{})
	go func() {
		p.Close()
		p.Close() // idempotent
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return within 5 s")
	}
	if s, err := c.read(5 * time.Second); err == nil {
		t.Errorf("read after Close = %q, nil; want the connection closed", s)
	}
	if nc, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		nc.Close()
		t.Errorf("dial after Close succeeded")
	}
}

func TestProxyTargetDown(t *testing.T) {
	t.Parallel()
	port, err := spawn.FreePort() // free a moment ago, and nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	p := NewProxy(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	c := dialRaw(t, p.Addr())
	if s, err := c.read(5 * time.Second); err == nil {
		t.Errorf("read through a proxy to a closed port = %q, nil; want the connection closed", s)
	}
}

// serverPort asks the server at the other end of c for its port.
func (c *rawConn) serverPort(t *testing.T) string {
	t.Helper()
	c.send(t, "CONFIG GET port")
	var lines []string
	for range 5 { // *2, $4, port, $N, the port
		s, err := c.read(5 * time.Second)
		if err != nil {
			t.Fatalf("CONFIG GET port: %q, then %v", lines, err)
		}
		lines = append(lines, s)
	}
	return lines[4]
}

// TestProxySetTarget repoints a proxy: the connections it accepts from then
// on reach the new target, while a connection already open stays with the
// server it reached, as after a failover by repointing an address.
func TestProxySetTarget(t *testing.T) {
	t.Parallel()
	from, to := Shared(t), Start(t)
	p := NewProxy(t, from.Addr())
	before := dialRaw(t, p.Addr())
	if got, want := before.serverPort(t), strconv.Itoa(from.Port()); got != want {
		t.Fatalf("before SetTarget: a connection reached port %s, want %s", got, want)
	}
	// SetTarget races with the proxy's accepting: the race detector
	// watches the target's reads and writes.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 20 {
			c := dialRaw(t, p.Addr())
			if s, _, err := c.ping(t, 5*time.Second); err != nil || s != "+PONG" {
				t.Errorf("PING while the target changed = %q, %v", s, err)
				return
			}
		}
	}()
	p.SetTarget(to.Addr())
	<-done
	if p.Target() != to.Addr() {
		t.Errorf("Target() = %s after SetTarget(%s)", p.Target(), to.Addr())
	}
	steps := []struct {
		name string
		c    *rawConn
		want int
	}{
		{"the connection open before SetTarget", before, from.Port()},
		{"a connection accepted after SetTarget", dialRaw(t, p.Addr()), to.Port()},
	}
	for _, st := range steps {
		if got := st.c.serverPort(t); got != strconv.Itoa(st.want) {
			t.Errorf("%s reached port %s, want %d", st.name, got, st.want)
		}
	}
}
