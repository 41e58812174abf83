package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) { Main(m) }

// do runs a command that must succeed.
func do(t *testing.T, s *Server, args ...string) Reply {
	t.Helper()
	r, err := s.Do(args...)
	if err != nil {
		t.Fatalf("Do(%q) on %s: %v", args, s.Addr(), err)
	}
	return r
}

// doString runs a command that must reply with a string.
func doString(t *testing.T, s *Server, args ...string) string {
	t.Helper()
	str, err := do(t, s, args...).String()
	if err != nil {
		t.Fatalf("Do(%q): %v", args, err)
	}
	return str
}

// gone reports whether process pid has ended and been reaped.
func gone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

func TestStartDo(t *testing.T) {
	t.Parallel()
	s := Start(t)
	if s.Addr() != "127.0.0.1:"+strconv.Itoa(s.Port()) {
		t.Errorf("Addr() = %q, Port() = %d", s.Addr(), s.Port())
	}
	if s.Port() == systemPort {
		t.Errorf("Port() = %d, the system Redis's port", s.Port())
	}
	if s.PID() == 0 {
		t.Errorf("PID() = 0 for a running server")
	}

	steps := []struct {
		args []string
		want string // the reply as %v prints it
	}{
		{[]string{"PING"}, "PONG"},
		{[]string{"SET", "k", "v"}, "OK"},
		{[]string{"GET", "k"}, `"v"`},
		{[]string{"GET", "missing"}, "(nil)"},
		{[]string{"SET", "empty", ""}, "OK"},
		{[]string{"GET", "empty"}, `""`},
		{[]string{"INCR", "n"}, "(integer) 1"},
		{[]string{"INCRBY", "n", "-5"}, "(integer) -4"},
		{[]string{"RPUSH", "list", "a", "b c", "\r\n"}, "(integer) 3"},
		{[]string{"LRANGE", "list", "0", "-1"}, `["a" "b c" "\r\n"]`},
		{[]string{"LRANGE", "nolist", "0", "-1"}, "[]"},
		{[]string{"EVAL", "return {1, 'x', {2}, redis.error_reply('E1 inner')}", "0"}, `[(integer) 1 "x" [(integer) 2] (error) E1 inner]`},
	}
	for i, st := range steps {
		r, err := s.Do(st.args...)
		if err != nil {
			t.Fatalf("step %d: Do(%q): %v", i, st.args, err)
		}
		if got := fmt.Sprint(r); got != st.want {
			t.Errorf("step %d: Do(%q) = %s, want %s", i, st.args, got, st.want)
		}
	}

	if got := doString(t, s, "GET", "k"); got != "v" {
		t.Errorf(`GET k = %q, want "v"`, got)
	}
	if r := do(t, s, "GET", "missing"); !r.IsNil() || r.Kind() != KindNil {
		t.Errorf("GET missing = %v, kind %v; want nil", r, r.Kind())
	}
	if n, err := do(t, s, "GET", "n").Int(); err != nil || n != -4 {
		t.Errorf("GET n: Int() = %d, %v; want -4", n, err)
	}

	errorSteps := []struct {
		args       []string
		wantPrefix string
	}{
		{[]string{"NOSUCHCOMMAND"}, "ERR"},
		{[]string{"GET", "list"}, "WRONGTYPE"},
		{[]string{"CLUSTER", "KEYSLOT", "k"}, "ERR"}, // not a cluster node
	}
	for i, st := range errorSteps {
		_, err := s.Do(st.args...)
		var rerr *RedisError
		if !errors.As(err, &rerr) || rerr.Prefix() != st.wantPrefix {
			t.Errorf("step %d: Do(%q) error = %v, want a *RedisError with prefix %s", i, st.args, err, st.wantPrefix)
		}
	}
	// An error reply leaves the connection usable.
	if got := doString(t, s, "PING"); got != "PONG" {
		t.Errorf("PING after errors = %q", got)
	}
	if _, err := s.Do(); err == nil {
		t.Error("Do() with no command succeeded")
	}
}

func TestDoConcurrentSafe(t *testing.T) {
	t.Parallel()
	s := Start(t)
	const goroutines, incrs = 8, 50
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range incrs {
				if _, err := s.Do("INCR", "counter"); err != nil {
					t.Errorf("INCR: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n, err := do(t, s, "GET", "counter").Int(); err != nil || n != goroutines*incrs {
		t.Errorf("counter = %d, %v; want %d", n, err, goroutines*incrs)
	}
}

func TestWithArgs(t *testing.T) {
	t.Parallel()
	s := Start(t, WithArgs("--maxmemory", "10mb"), WithArgs("--maxmemory-policy", "allkeys-lru"))
	for _, tc := range []struct{ name, want string }{
		{"maxmemory", "10485760"},
		{"maxmemory-policy", "allkeys-lru"},
		{"save", ""},
		{"appendonly", "no"},
		{"repl-diskless-sync-delay", "0"},
	} {
		got, err := do(t, s, "CONFIG", "GET", tc.name).Strings()
		if err != nil || len(got) != 2 || got[1] != tc.want {
			t.Errorf("CONFIG GET %s = %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}

	for _, arg := range []string{"--port", "--dir", "--cluster-enabled"} {
		if _, err := startServer([]Option{WithArgs(arg, "x")}, false, false); err == nil {
			t.Errorf("startServer with WithArgs(%q) succeeded", arg)
		}
	}
}

func TestKillRestart(t *testing.T) {
	t.Parallel()
	s := Start(t)
	port, pid := s.Port(), s.PID()
	do(t, s, "SET", "k", "v")

	if err := s.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if got := s.PID(); got != 0 {
		t.Errorf("PID() after Kill = %d, want 0", got)
	}
	if !gone(pid) {
		t.Errorf("pid %d still exists after Kill", pid)
	}
	if _, err := s.Do("PING"); !errors.Is(err, ErrStopped) {
		t.Errorf("PING after Kill: %v, want ErrStopped", err)
	}
	if err := s.Kill(); err != nil {
		t.Errorf("second Kill: %v", err)
	}

	if err := s.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if s.Port() != port {
		t.Errorf("Port() after Restart = %d, want %d", s.Port(), port)
	}
	if got := s.PID(); got == 0 || got == pid {
		t.Errorf("PID() after Restart = %d, want a new PID (was %d)", got, pid)
	}
	if r := do(t, s, "GET", "k"); !r.IsNil() {
		t.Errorf("GET k after Restart = %v, want (nil): the data should be gone", r)
	}
	do(t, s, "SET", "k", "v2")
	if got := doString(t, s, "GET", "k"); got != "v2" {
		t.Errorf("GET k = %q, want v2", got)
	}

	// Restart of a running server kills it first.
	pid = s.PID()
	if err := s.Restart(); err != nil {
		t.Fatalf("Restart of a running server: %v", err)
	}
	if !gone(pid) || s.PID() == pid {
		t.Errorf("Restart of a running server left pid %d", pid)
	}
}

func TestStop(t *testing.T) {
	t.Parallel()
	s := Start(t)
	pid := s.PID()
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if !gone(pid) {
		t.Errorf("pid %d still exists after Stop", pid)
	}
	if err := s.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if _, err := s.Do("PING"); !errors.Is(err, ErrStopped) {
		t.Errorf("PING after Stop: %v, want ErrStopped", err)
	}
}

func TestCleanupEndsProcess(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		before func(*Server) error // what the test does before its cleanup
	}{
		{"running", func(*Server) error { return nil }},
		{"killed", (*Server).Kill},
		{"stopped", (*Server).Stop},
	} {
		var s *Server
		var pid int
		ok := t.Run(tc.name, func(t *testing.T) {
			s = Start(t)
			pid = s.PID()
			if err := tc.before(s); err != nil {
				t.Fatal(err)
			}
		})
		if !ok {
			t.Errorf("%s: the subtest or its cleanup failed", tc.name)
			continue
		}
		if s == nil {
			continue // -run left the subtest out
		}
		if !gone(pid) {
			t.Errorf("%s: pid %d still exists after the cleanup", tc.name, pid)
		}
		if _, err := os.Stat(s.Dir()); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: directory %s still exists after the cleanup (%v)", tc.name, s.Dir(), err)
		}
		if err := s.Restart(); !errors.Is(err, ErrClosed) {
			t.Errorf("%s: Restart after the cleanup: %v, want ErrClosed", tc.name, err)
		}
	}
}

// TestPortTaken starts servers on ports that are already taken: the start
// must fail as errPortInUse, which Start retries on a new port, and must
// never take the server already on the port for its own.
func TestPortTaken(t *testing.T) {
	t.Parallel()
	bin, err := lookPath("redis-server")
	if err != nil {
		t.Fatal(err)
	}
	other := Start(t) // a Redis that answers PING on the port
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	listenerPort := l.Addr().(*net.TCPAddr).Port
	bus, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	busPort := bus.Addr().(*net.TCPAddr).Port

	for _, tc := range []struct {
		name        string
		port        int
		clusterNode bool
	}{
		{"by another redis-server", other.Port(), false},
		{"by a listener", listenerPort, false},
		{"cluster bus by a listener", busPort - clusterBusOffset, true},
	} {
		if tc.port <= 0 {
			continue // the bus listener's port is too low to be a bus port
		}
		dir := t.TempDir()
		s := &Server{port: tc.port, dir: dir, bin: bin, args: serverArgs(tc.port, dir, tc.clusterNode)}
		if err := s.launch(); !errors.Is(err, errPortInUse) {
			t.Errorf("%s: launch on port %d: %v, want errPortInUse", tc.name, tc.port, err)
			s.close()
		}
	}
	if got := doString(t, other, "PING"); got != "PONG" {
		t.Errorf("the other server: PING = %q", got)
	}
}

func TestMissingBinary(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := startServer(nil, false, false)
	if err == nil || !strings.Contains(err.Error(), "apt-get install redis-server redis-tools") {
		t.Errorf("startServer without redis-server on PATH: %v; want the packages named", err)
	}
	_, err = startCluster(nil, false, t.Logf)
	if err == nil || !strings.Contains(err.Error(), "redis-cli") {
		t.Errorf("startCluster without redis-cli on PATH: %v; want redis-cli named", err)
	}
}

func TestShared(t *testing.T) {
	t.Parallel()
	first := Shared(t)
	for i := range 4 {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			t.Parallel()
			s := Shared(t)
			if s != first {
				t.Fatalf("Shared returned %p, then %p", first, s)
			}
			key := t.Name() + ":k"
			do(t, s, "SET", key, strconv.Itoa(i))
			if got := doString(t, s, "GET", key); got != strconv.Itoa(i) {
				t.Errorf("GET %s = %q, want %d", key, got, i)
			}
		})
	}
	for name, f := range map[string]func() error{
		"Kill": first.Kill, "Stop": first.Stop, "Restart": first.Restart,
	} {
		if err := f(); !errors.Is(err, ErrShared) {
			t.Errorf("%s on the shared server: %v, want ErrShared", name, err)
		}
	}
}

func TestSharedCluster(t *testing.T) {
	t.Parallel()
	c := SharedCluster(t)
	if c2 := SharedCluster(t); c2 != c {
		t.Fatalf("SharedCluster returned %p, then %p", c, c2)
	}
	if err := c.WaitOK(); err != nil {
		t.Fatal(err)
	}
	if got := len(c.Servers()); got != clusterMasters {
		t.Fatalf("%d servers, want %d", got, clusterMasters)
	}
	for _, s := range c.Servers() {
		info := doString(t, s, "CLUSTER", "INFO")
		if got := infoField(info, "cluster_state"); got != "ok" {
			t.Errorf("%s: cluster_state:%s", s.Addr(), got)
		}
		if err := s.Kill(); !errors.Is(err, ErrShared) {
			t.Errorf("Kill on a shared cluster node: %v, want ErrShared", err)
		}
	}

	// Keys in many slots: the owner takes them; every other node redirects
	// to the owner.
	owners := map[*Server]int{}
	for i := range 30 {
		key := fmt.Sprintf("%s:%d", t.Name(), i)
		slot := Slot(key)
		owner, err := c.Owner(key)
		if err != nil {
			t.Fatal(err)
		}
		owners[owner]++
		do(t, owner, "SET", key, "v")
		if got := doString(t, owner, "GET", key); got != "v" {
			t.Errorf("GET %s on its owner %s = %q", key, owner.Addr(), got)
		}
		for _, s := range c.Servers() {
			if s == owner {
				continue
			}
			_, err := s.Do("GET", key)
			want := fmt.Sprintf("MOVED %d %s", slot, owner.Addr())
			var rerr *RedisError
			if !errors.As(err, &rerr) || rerr.Msg != want {
				t.Errorf("GET %s on %s: %v, want %s", key, s.Addr(), err, want)
			}
		}
	}
	if len(owners) != clusterMasters {
		t.Errorf("30 keys landed on %d nodes, want all %d", len(owners), clusterMasters)
	}
}

func TestClusterKillRestart(t *testing.T) {
	t.Parallel()
	c := StartCluster(t)
	victim := c.Servers()[1]
	key := "{" + t.Name() + "}"
	for i := 0; ; i++ {
		if owner, err := c.Owner(key); err != nil {
			t.Fatal(err)
		} else if owner == victim {
			break
		}
		key = fmt.Sprintf("{%s-%d}", t.Name(), i)
	}
	do(t, victim, "SET", key, "v")

	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitOK(); !errors.Is(err, ErrStopped) {
		t.Errorf("WaitOK with a node killed: %v, want ErrStopped", err)
	}
	start := time.Now()
	if err := victim.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	t.Logf("Restart of a cluster node took %v", time.Since(start).Round(time.Millisecond))
	for _, s := range c.Servers() {
		if got := infoField(doString(t, s, "CLUSTER", "INFO"), "cluster_state"); got != "ok" {
			t.Errorf("%s: cluster_state:%s after Restart", s.Addr(), got)
		}
	}
	if owner, err := c.Owner(key); err != nil || owner != victim {
		t.Errorf("Owner(%q) after Restart = %v, %v; want the restarted node", key, owner, err)
	}
	if r := do(t, victim, "GET", key); !r.IsNil() {
		t.Errorf("GET %s after Restart = %v, want (nil)", key, r)
	}
	do(t, victim, "SET", key, "v2")
}

func TestSlot(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		key  string
		want int
	}{
		{"", 0},
		{"123456789", 0x31C3}, // the CRC-16/XMODEM check value
		{"foo", 12182},
		{"bar", 5061},
		{"{foo}", 12182},
		{"x{foo}y", 12182},
		{"{foo}{bar}", 12182}, // the first tag
		{"{foo}bar}", 12182},  // the first '}' after the '{'
	} {
		if got := Slot(tc.key); got != tc.want {
			t.Errorf("Slot(%q) = %d, want %d", tc.key, got, tc.want)
		}
	}
	if Slot("foo{}{bar}") == Slot("bar") {
		t.Errorf(`Slot("foo{}{bar}") hashed "bar"; an empty first tag means the whole key`)
	}
	if Slot("foo{{bar}}zap") != Slot("{bar") {
		t.Errorf(`Slot("foo{{bar}}zap") != Slot("{bar")`)
	}
}

// TestSlotMatchesRedis compares Slot with CLUSTER KEYSLOT.
func TestSlotMatchesRedis(t *testing.T) {
	t.Parallel()
	node := SharedCluster(t).Servers()[0]
	keys := []string{
		"", "{", "}", "{}", "}{", "{{}}", "{a}", "a{b}c", "a{}b", "{}{a}",
		"a{b", "a}b{c}", "{a}{b}", "{{a}}", "{a{b}c}", "\x00{\x00}", "é{é}",
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = "{}ab\x00\xff"
	for range 300 {
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		keys = append(keys, string(b))
	}
	for _, key := range keys {
		want, err := do(t, node, "CLUSTER", "KEYSLOT", key).Int()
		if err != nil {
			t.Fatal(err)
		}
		if got := Slot(key); got != int(want) {
			t.Errorf("Slot(%q) = %d, CLUSTER KEYSLOT = %d", key, got, want)
		}
	}
}

func TestReadReply(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want string // the reply as %v prints it
		kind Kind
	}{
		{"+OK\r\n", "OK", KindSimpleString},
		{"+\r\n", "", KindSimpleString},
		{"-ERR bad\r\n", "(error) ERR bad", KindError},
		{":42\r\n", "(integer) 42", KindInteger},
		{":-9223372036854775808\r\n", "(integer) -9223372036854775808", KindInteger},
		{"$3\r\nfoo\r\n", `"foo"`, KindBulkString},
		{"$0\r\n\r\n", `""`, KindBulkString},
		{"$4\r\na\r\nb\r\n", `"a\r\nb"`, KindBulkString},
		{"$-1\r\n", "(nil)", KindNil},
		{"*-1\r\n", "(nil)", KindNil},
		{"*0\r\n", "[]", KindArray},
		{"*2\r\n*1\r\n:1\r\n$-1\r\n", "[[(integer) 1] (nil)]", KindArray},
		{"*2\r\n-E1\r\n+OK\r\n", "[(error) E1 OK]", KindArray},
	} {
		r, err := readReply(bufio.NewReader(strings.NewReader(tc.in)))
		if err != nil {
			t.Errorf("readReply(%q): %v", tc.in, err)
			continue
		}
		if got := fmt.Sprint(r); got != tc.want || r.Kind() != tc.kind {
			t.Errorf("readReply(%q) = %s (%v), want %s (%v)", tc.in, got, r.Kind(), tc.want, tc.kind)
		}
	}

	for _, in := range []string{
		"", "\r\n", "OK\r\n", "+OK\n", "+OK", ":x\r\n", ":1.5\r\n",
		"$3\r\nfo\r\n", "$3\r\nfooXY", "$-2\r\n", "$x\r\n", "$99999999999\r\n",
		"*2\r\n:1\r\n", "*-2\r\n", "*1\r\n?\r\n",
		strings.Repeat("*1\r\n", maxDepth+2) + ":1\r\n",
	} {
		if r, err := readReply(bufio.NewReader(strings.NewReader(in))); err == nil {
			t.Errorf("readReply(%q) = %v, want an error", in, r)
		}
	}
}

func TestReplyAccessors(t *testing.T) {
	t.Parallel()
	bulk := Reply{kind: KindBulkString, str: "12"}
	integer := Reply{kind: KindInteger, num: 7}
	array := Reply{kind: KindArray, elems: []Reply{bulk, {kind: KindSimpleString, str: "OK"}}}
	var null Reply

	if s, err := bulk.String(); s != "12" || err != nil {
		t.Errorf("bulk.String() = %q, %v", s, err)
	}
	if n, err := bulk.Int(); n != 12 || err != nil {
		t.Errorf("bulk.Int() = %d, %v", n, err)
	}
	if n, err := integer.Int(); n != 7 || err != nil {
		t.Errorf("integer.Int() = %d, %v", n, err)
	}
	if ss, err := array.Strings(); err != nil || strings.Join(ss, ",") != "12,OK" {
		t.Errorf("array.Strings() = %q, %v", ss, err)
	}
	for name, err := range map[string]error{
		"integer.String()": second(integer.String()),
		"null.String()":    second(null.String()),
		"array.Int()":      second(array.Int()),
		"text.Int()":       second(Reply{kind: KindBulkString, str: "x"}.Int()),
		"bulk.Array()":     second(bulk.Array()),
		"null.Array()":     second(null.Array()),
		"mixed.Strings()":  second(Reply{kind: KindArray, elems: []Reply{integer}}.Strings()),
	} {
		if err == nil {
			t.Errorf("%s succeeded on the wrong kind", name)
		}
	}
	if err := (Reply{kind: KindError, str: "ERR x"}).Err(); err == nil || err.Error() != "ERR x" {
		t.Errorf("Err() = %v, want ERR x", err)
	}
	if err := bulk.Err(); err != nil {
		t.Errorf("bulk.Err() = %v, want nil", err)
	}
	if got := Kind(99).String(); got != "Kind(99)" {
		t.Errorf("Kind(99).String() = %q", got)
	}
}

func second[T any](_ T, err error) error { return err }

// FuzzReadReply checks that no input makes readReply panic or accept a
// reply that does not print.
func FuzzReadReply(f *testing.F) {
	for _, seed := range []string{"+OK\r\n", "$3\r\nfoo\r\n", "*2\r\n:1\r\n$-1\r\n", "-ERR x\r\n", "*1\r\n*1\r\n*0\r\n"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		r, err := readReply(bufio.NewReader(strings.NewReader(string(in))))
		if err == nil {
			_ = fmt.Sprint(r)
		}
	})
}

func TestReshard(t *testing.T) {
	t.Parallel()
	c := StartCluster(t)
	servers := c.Servers()
	from, to := servers[0], servers[2]
	// redis-cli moves a node's lowest slots first.
	slots, err := c.slotMap(from)
	if err != nil {
		t.Fatal(err)
	}
	low := NumSlots
	for _, r := range slots {
		if r.port == from.Port() {
			low = min(low, r.first)
		}
	}
	var keys []string
	for i := 0; len(keys) < 20; i++ {
		key := fmt.Sprintf("{%s-%d}:v", t.Name(), i)
		if s := Slot(key); s >= low && s < low+8 {
			keys = append(keys, key)
			do(t, from, "SET", key, key)
		}
	}
	if err := c.Reshard(from, to, 8, 3); err != nil {
		t.Fatal(err)
	}
	for _, key := range keys {
		owner, err := c.Owner(key)
		if err != nil {
			t.Fatal(err)
		}
		if owner != to {
			t.Fatalf("%s (slot %d) is served by %s after the reshard, want %s", key, Slot(key), owner.Addr(), to.Addr())
		}
		if got := doString(t, to, "GET", key); got != key {
			t.Errorf("GET %s on the new owner: %q", key, got)
		}
	}

	for name, err := range map[string]error{
		"one node":     c.Reshard(from, from, 1, 0),
		"no slots":     c.Reshard(from, to, 0, 0),
		"nil":          c.Reshard(nil, to, 1, 0),
		"another's":    c.Reshard(from, Start(t), 1, 0),
		"shared nodes": SharedCluster(t).Reshard(SharedCluster(t).Servers()[0], SharedCluster(t).Servers()[1], 1, 0),
	} {
		if err == nil {
			t.Errorf("Reshard with %s: no error", name)
		}
	}
}
