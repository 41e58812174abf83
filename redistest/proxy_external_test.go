package redistest_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/redistest"
)

// These tests use the proxy as a user of the package does: through its
// exported API alone, with a plain TCP client that sends inline commands
// through the proxy and checks what reaches the server with [Server.Do].

// Waits. A reply that must come has 5 seconds, so that a loaded machine
// makes a test slower, not flaky; a reply that must not come is given up
// after 200 ms, which can only make such a check pass more easily.
const (
	replyWait   = 5 * time.Second
	silenceWait = 200 * time.Millisecond
)

// lineConn is a client connection that sends inline commands and reads
// the reply's lines, each within a deadline.
type lineConn struct {
	nc net.Conn
	r  *bufio.Reader
}

// connect dials addr; t.Cleanup closes the connection.
func connect(t *testing.T, addr string) *lineConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, replyWait)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { nc.Close() })
	return &lineConn{nc: nc, r: bufio.NewReader(nc)}
}

// send writes one inline command, such as "SET k v".
func (c *lineConn) send(t *testing.T, cmd string) {
	t.Helper()
	c.nc.SetWriteDeadline(time.Now().Add(replyWait))
	if _, err := io.WriteString(c.nc, cmd+"\r\n"); err != nil {
		t.Fatalf("write %q: %v", cmd, err)
	}
}

// line reads one line of a reply, without its CRLF, within d.
func (c *lineConn) line(d time.Duration) (string, error) {
	c.nc.SetReadDeadline(time.Now().Add(d))
	s, err := c.r.ReadString('\n')
	return strings.TrimSuffix(s, "\r\n"), err
}

// ping sends PING and returns its reply line and how long it took.
func (c *lineConn) ping(t *testing.T, d time.Duration) (string, time.Duration, error) {
	t.Helper()
	start := time.Now()
	c.send(t, "PING")
	s, err := c.line(d)
	return s, time.Since(start), err
}

// get sends GET key and returns the value, or "(nil)" for a missing key.
func (c *lineConn) get(t *testing.T, key string) string {
	t.Helper()
	c.send(t, "GET "+key)
	header, err := c.line(replyWait)
	if err != nil || !strings.HasPrefix(header, "$") {
		t.Fatalf("GET %s: reply %q, %v; want a bulk string", key, header, err)
	}
	if header == "$-1" {
		return "(nil)"
	}
	v, err := c.line(replyWait)
	if err != nil {
		t.Fatalf("GET %s: value: %v", key, err)
	}
	return v
}

// mustPong fails the test unless a PING on c answers PONG.
func mustPong(t *testing.T, c *lineConn, what string) {
	t.Helper()
	if s, _, err := c.ping(t, replyWait); err != nil || s != "+PONG" {
		t.Fatalf("%s: PING = %q, %v; want +PONG", what, s, err)
	}
}

// serverGet returns the value of key on s, read without the proxy, or
// "(nil)".
func serverGet(t *testing.T, s *redistest.Server, key string) string {
	t.Helper()
	r, err := s.Do("GET", key)
	if err != nil {
		t.Fatalf("Do(GET %s) on %s: %v", key, s.Addr(), err)
	}
	if r.IsNil() {
		return "(nil)"
	}
	v, err := r.String()
	if err != nil {
		t.Fatalf("Do(GET %s) on %s: %v", key, s.Addr(), err)
	}
	return v
}

// serverSet sets key to value on s without the proxy.
func serverSet(t *testing.T, s *redistest.Server, key, value string) {
	t.Helper()
	if _, err := s.Do("SET", key, value); err != nil {
		t.Fatalf("Do(SET %s %s) on %s: %v", key, value, s.Addr(), err)
	}
}

// TestExternalProxyPass checks a new proxy: it listens on an address of
// its own, forwards to its target, and passes commands and replies
// through, on one connection and on several.
func TestExternalProxyPass(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := redistest.NewProxy(t, srv.Addr())
	if p.Addr() == srv.Addr() || p.Target() != srv.Addr() {
		t.Fatalf("NewProxy(t, %s): Addr() = %s, Target() = %s", srv.Addr(), p.Addr(), p.Target())
	}
	for i := range 3 {
		c := connect(t, p.Addr())
		for j := range 2 {
			mustPong(t, c, fmt.Sprintf("connection %d, PING %d", i, j))
		}
	}
	// A write through the proxy lands on the target.
	c := connect(t, p.Addr())
	c.send(t, "SET k through")
	if got, err := c.line(replyWait); err != nil || got != "+OK" {
		t.Fatalf("SET k through the proxy = %q, %v; want +OK", got, err)
	}
	if got := serverGet(t, srv, "k"); got != "through" {
		t.Errorf("GET k on the server = %q after SET through the proxy, want through", got)
	}
}

// TestExternalProxyDelay checks Delay: each reply comes at least the delay
// later, once per round trip; requests are not delayed, so a write
// reaches the server while its reply is still held; and Delay(0) and Pass
// end a delay.
func TestExternalProxyDelay(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := redistest.NewProxy(t, srv.Addr())
	c := connect(t, p.Addr())
	mustPong(t, c, "before Delay")

	for _, d := range []time.Duration{50 * time.Millisecond, 150 * time.Millisecond} {
		p.Delay(d)
		start := time.Now()
		for i := range 3 {
			got, took, err := c.ping(t, replyWait)
			if err != nil || got != "+PONG" {
				t.Fatalf("Delay(%v): PING %d = %q, %v; want +PONG", d, i, got, err)
			}
			if took < d {
				t.Errorf("Delay(%v): PING %d took %v, want at least %v", d, i, took, d)
			}
		}
		if took := time.Since(start); took < 3*d {
			t.Errorf("Delay(%v): 3 PINGs in turn took %v, want at least %v", d, took, 3*d)
		}
	}

	// With replies held for an hour, a SET still reaches the server: only
	// the server's direction is delayed. The connection's replies stay
	// held behind this one.
	p.Delay(time.Hour)
	c.send(t, "SET k v")
	deadline := time.Now().Add(replyWait)
	for serverGet(t, srv, "k") != "v" {
		if time.Now().After(deadline) {
			t.Fatalf("SET k v through a proxy delaying replies by an hour has not reached the server after %v", replyWait)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got, err := c.line(silenceWait); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("SET k v with Delay(1h): reply %q, %v; want none yet", got, err)
	}

	// Delay(0) and Pass each end an hour's delay: a new connection's PING
	// is answered within the wait, not an hour later.
	for _, st := range []struct {
		name string
		end  func()
	}{
		{"Delay(0)", func() { p.Delay(0) }},
		{"Pass", p.Pass},
	} {
		p.Delay(time.Hour)
		st.end()
		mustPong(t, connect(t, p.Addr()), "a new connection after Delay(1h), then "+st.name)
	}
}

// TestExternalProxyBlackhole checks Blackhole: the proxy still accepts
// connections and takes writes, but no request reaches the server and no
// reply reaches the client, on a connection open before and on one made
// during it, and neither is closed; Pass then delivers what was held, in
// order, and the proxy serves as before.
func TestExternalProxyBlackhole(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := redistest.NewProxy(t, srv.Addr())
	open := connect(t, p.Addr())
	mustPong(t, open, "before Blackhole")

	p.Blackhole()
	late := connect(t, p.Addr()) // accepted during the blackhole
	open.send(t, "SET k held")
	open.send(t, "GET k")
	late.send(t, "PING")
	for _, st := range []struct {
		name string
		c    *lineConn
	}{{"the connection open before Blackhole", open}, {"a connection made during Blackhole", late}} {
		got, err := st.c.line(silenceWait)
		// A timeout, not io.EOF: the connection is open but silent.
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("%s: a reply during Blackhole = %q, %v; want none within %v", st.name, got, err, silenceWait)
		}
	}
	if got := serverGet(t, srv, "k"); got != "(nil)" {
		t.Errorf("GET k on the server during Blackhole = %q, want (nil): the SET must not reach it", got)
	}

	p.Pass()
	steps := []struct {
		name string
		c    *lineConn
		want []string
	}{
		{"the connection open before Blackhole", open, []string{"+OK", "$4", "held"}},
		{"a connection made during Blackhole", late, []string{"+PONG"}},
	}
	for _, st := range steps {
		for i, want := range st.want {
			if got, err := st.c.line(replyWait); err != nil || got != want {
				t.Errorf("%s: held reply line %d after Pass = %q, %v; want %q", st.name, i, got, err, want)
			}
		}
		mustPong(t, st.c, st.name+" after Pass")
	}
	if got := serverGet(t, srv, "k"); got != "held" {
		t.Errorf("GET k on the server after Pass = %q, want held", got)
	}
	mustPong(t, connect(t, p.Addr()), "a connection made after Pass")
}

// TestExternalProxySetTarget checks SetTarget: the connections accepted
// from then on reach the new target, while a connection already open
// stays with the server it reached.
func TestExternalProxySetTarget(t *testing.T) {
	t.Parallel()
	first, second := redistest.Start(t), redistest.Start(t)
	serverSet(t, first, "whoami", "first")
	serverSet(t, second, "whoami", "second")
	p := redistest.NewProxy(t, first.Addr())
	before := connect(t, p.Addr())
	if got := before.get(t, "whoami"); got != "first" {
		t.Fatalf("before SetTarget: GET whoami through the proxy = %q, want first", got)
	}

	p.SetTarget(second.Addr())
	if p.Target() != second.Addr() {
		t.Errorf("Target() = %s after SetTarget(%s)", p.Target(), second.Addr())
	}
	after := connect(t, p.Addr())
	steps := []struct {
		name string
		c    *lineConn
		want string
	}{
		{"a connection made after SetTarget", after, "second"},
		{"the connection open before SetTarget", before, "first"},
	}
	for _, st := range steps {
		if got := st.c.get(t, "whoami"); got != st.want {
			t.Errorf("%s: GET whoami = %q, want %q", st.name, got, st.want)
		}
	}
	// A write on the new connection lands on the new target only.
	after.send(t, "SET moved yes")
	if got, err := after.line(replyWait); err != nil || got != "+OK" {
		t.Fatalf("SET moved yes after SetTarget = %q, %v; want +OK", got, err)
	}
	if got := serverGet(t, second, "moved"); got != "yes" {
		t.Errorf("GET moved on the new target = %q, want yes", got)
	}
	if got := serverGet(t, first, "moved"); got != "(nil)" {
		t.Errorf("GET moved on the old target = %q, want (nil)", got)
	}
}

// TestExternalProxyTargetDown checks a proxy whose server dies: the
// connection open through it is closed, a new connection is closed at
// once since the proxy cannot dial the server, and once the server is
// back on its port a new connection reaches it.
func TestExternalProxyTargetDown(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := redistest.NewProxy(t, srv.Addr())
	open := connect(t, p.Addr())
	mustPong(t, open, "before Kill")
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	for _, st := range []struct {
		name string
		c    *lineConn
	}{{"the connection open before Kill", open}, {"a connection made after Kill", connect(t, p.Addr())}} {
		// Closed, not silent: the read ends before its deadline.
		if got, err := st.c.line(replyWait); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("%s: read with the server down = %q, %v; want the connection closed", st.name, got, err)
		}
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	mustPong(t, connect(t, p.Addr()), "a connection made after Restart")
}
