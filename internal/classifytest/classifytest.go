package classifytest

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redisfaults"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/redisstore"
	"github.com/sluicehq/sluice/telemetry"
)

// Dial is what a row's client needs to reach its server.
type Dial struct {
	Addr               string // "127.0.0.1:PORT"
	Username, Password string // empty: the default user, without a password
	TLS                *tls.Config
}

// Stores makes the stores the rows run through.
type Stores struct {
	// Single returns a store on a new client of the server d names,
	// which must not retry a failed dial (a wrong password would
	// otherwise cost each call a backoff), and which may be made while
	// the server refuses it. The test's cleanup closes both.
	Single func(t testing.TB, d Dial) core.Store
	// Cluster returns a store on a new Cluster client of the nodes
	// addrs. The test's cleanup closes both.
	Cluster func(t testing.TB, addrs []string) core.Store
	// Types gives, by row name, the error.type through this store's
	// client where it differs from the row's own: rueidis follows
	// redirections until the call's deadline where go-redis gives up
	// with the last one.
	Types map[string]string
}

// callTimeout bounds each call a row makes; no row's failure takes
// nearly as long.
const callTimeout = 2 * time.Second

// untilTimeout bounds how long a row waits for its failure to set in
// (a server loading its data after a restart, a script holding it).
const untilTimeout = 10 * time.Second

// Request returns the request the rows make: a token bucket's charge on
// key, on a key never charged before.
func Request(key string) core.Request {
	return core.Request{Key: key, Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(10)}}
}

// A row is a failure, how to provoke it and how it is classified.
type row struct {
	name   string
	server []redistest.Option
	// setup brings the server into the failing state, after it started.
	setup func(t *testing.T, srv *redistest.Server)
	// dial returns how the row's client reaches srv; nil is the plain
	// port as the default user.
	dial func(srv *redistest.Server) Dial
	// alg replaces the request's algorithm, for rows that need a
	// script of their own.
	alg core.Algorithm
	// failure: the store's failure, marked with core.ErrUnavailable; or
	// the request's error.
	failure bool
	// types are the error.type values the row may have: a later Redis
	// may answer some rows with another code.
	types []string
	// says is a text the error must hold: what names the failure.
	says string
	// breaker: the row also runs behind a breaker (CheckBreaker).
	breaker bool
}

// user returns a dial function for the plain port as name with password.
func user(name, password string) func(*redistest.Server) Dial {
	return func(srv *redistest.Server) Dial {
		return Dial{Addr: srv.Addr(), Username: name, Password: password}
	}
}

// do runs a command on srv that must succeed.
func do(t testing.TB, srv *redistest.Server, args ...string) redistest.Reply {
	t.Helper()
	r, err := srv.Do(args...)
	if err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	return r
}

// rows are the failures of one server, with their classification.
func rows(ca, otherCA *redistest.CA) []row {
	return []row{
		// The user's permissions and credentials: every request fails
		// alike until an operator changes them.
		{
			name:    "NOPERM command",
			server:  []redistest.Option{redistest.WithUser("noeval", "pw", "~*", "+@all", "-evalsha", "-eval")},
			dial:    user("noeval", "pw"),
			failure: true, types: []string{"NOPERM"}, says: "'evalsha'", breaker: true,
		},
		{
			name:    "NOPERM key pattern",
			server:  []redistest.Option{redistest.WithUser("other", "pw", "~other:*", "+@all")},
			dial:    user("other", "pw"),
			failure: true, types: []string{"NOPERM"}, says: "keys", breaker: true,
		},
		{
			// Redis 7.0 answers a script's command that the user may not
			// run with an ERR of its own; a later Redis may say NOPERM.
			name:    "read-only user",
			server:  []redistest.Option{redistest.WithUser("reader", "pw", "~*", "+@all", "-@write")},
			dial:    user("reader", "pw"),
			failure: true, types: []string{"ERR", "NOPERM"}, says: "command", breaker: true,
		},
		{
			// A user who may run EVALSHA but not EVAL: the store's
			// EVALSHA meets NOSCRIPT (the script was never loaded), and
			// its EVAL is refused. What a NOSCRIPT after the store's EVAL
			// would mean: the server runs no script of sluice's.
			name:    "NOPERM EVAL after NOSCRIPT",
			server:  []redistest.Option{redistest.WithUser("shaonly", "pw", "~*", "+@all", "-eval")},
			dial:    user("shaonly", "pw"),
			failure: true, types: []string{"NOPERM"}, says: "'eval'", breaker: true,
		},
		{
			name:    "WRONGPASS",
			server:  []redistest.Option{redistest.WithUser("sluice", "right", "~*", "+@all")},
			dial:    user("sluice", "wrong"),
			failure: true, types: []string{"WRONGPASS"}, says: "WRONGPASS", breaker: true,
		},
		{
			name: "NOAUTH",
			setup: func(t *testing.T, srv *redistest.Server) {
				do(t, srv, "CONFIG", "SET", "requirepass", "secret")
			},
			failure: true, types: []string{"NOAUTH"}, says: "NOAUTH", breaker: true,
		},
		// TLS: every handshake fails alike until a certificate or the
		// client's configuration changes.
		{
			name:   "TLS unknown CA",
			server: []redistest.Option{redistest.WithTLS(ca)},
			dial: func(srv *redistest.Server) Dial {
				return Dial{Addr: srv.TLSAddr(), TLS: otherCA.ClientConfig()}
			},
			failure: true, types: []string{telemetry.ErrorTypeUnavailable}, says: "unknown authority",
		},
		{
			name:   "TLS wrong host",
			server: []redistest.Option{redistest.WithTLS(ca)},
			dial: func(srv *redistest.Server) Dial {
				c := ca.ClientConfig()
				c.ServerName = "redis.invalid"
				return Dial{Addr: srv.TLSAddr(), TLS: c}
			},
			failure: true, types: []string{telemetry.ErrorTypeUnavailable}, says: "redis.invalid",
		},
		// The server's state: every request (every write) fails alike
		// until it changes.
		{
			name: "OOM",
			setup: func(t *testing.T, srv *redistest.Server) {
				do(t, srv, "CONFIG", "SET", "maxmemory", "1") // and noeviction, the default
			},
			failure: true, types: []string{"OOM"}, says: "OOM",
		},
		{
			name:    "BUSY",
			server:  []redistest.Option{redistest.WithArgs("--busy-reply-threshold", "10")},
			setup:   busy,
			failure: true, types: []string{"BUSY"}, says: "BUSY",
		},
		{
			name: "LOADING",
			// Redis loads slowly (key-load-delay, in µs a key) and answers
			// clients while it does (each KB of the file, about 70 keys). Few
			// keys, each long: every key's delay is a sleep, and on a
			// loaded machine each wake-up waits for a core, so 5000 keys
			// of 200 µs took more than the 10 s a restart may take; 1000 of
			// 1 ms leave room.
			server: []redistest.Option{redistest.WithArgs(
				"--key-load-delay", "1000", "--loading-process-events-interval-bytes", "1024")},
			setup:   loading,
			failure: true, types: []string{"LOADING"}, says: "LOADING",
		},
		{
			// A replica, as a primary becomes when it is demoted after a
			// failover; its primary here is a port nothing listens on.
			name: "READONLY",
			setup: func(t *testing.T, srv *redistest.Server) {
				do(t, srv, "REPLICAOF", "127.0.0.1", strconv.Itoa(closedPort(t)))
			},
			failure: true, types: []string{"READONLY"}, says: "READONLY",
		},
		{
			name: "MASTERDOWN",
			setup: func(t *testing.T, srv *redistest.Server) {
				do(t, srv, "CONFIG", "SET", "replica-serve-stale-data", "no")
				do(t, srv, "REPLICAOF", "127.0.0.1", strconv.Itoa(closedPort(t)))
			},
			failure: true, types: []string{"MASTERDOWN"}, says: "MASTERDOWN",
		},
		{
			name:    "MISCONF",
			setup:   misconf,
			failure: true, types: []string{"MISCONF"}, says: "MISCONF",
		},
		{
			name: "NOREPLICAS",
			setup: func(t *testing.T, srv *redistest.Server) {
				do(t, srv, "CONFIG", "SET", "min-replicas-to-write", "1")
			},
			failure: true, types: []string{"NOREPLICAS"}, says: "NOREPLICAS",
		},
		{
			name: "connection refused",
			setup: func(t *testing.T, srv *redistest.Server) {
				if err := srv.Kill(); err != nil {
					t.Fatal(err)
				}
			},
			failure: true, types: []string{telemetry.ErrorTypeConnection}, says: "refused",
		},
		// The request's own errors: another request would not get them.
		{
			name:    "script error",
			alg:     redisfaults.NewScripted("classify-error", "error('oops')"),
			failure: false, types: []string{"ERR"}, says: "oops",
		},
		{
			// sluice's own scripts replace a key of another type (see
			// docs/redis.md); a script of one's own may not.
			name:    "WRONGTYPE",
			alg:     redisfaults.NewScripted("classify-wrongtype", "redis.call('SET', KEYS[1], 'x') return redis.call('HGET', KEYS[1], 'f')"),
			failure: false, types: []string{"WRONGTYPE"}, says: "WRONGTYPE",
		},
		{
			name:    "malformed reply",
			alg:     redisfaults.NewScripted("classify-malformed", "return {1, 2}"),
			failure: false, says: redisstore.ErrMalformed.Error(),
		},
	}
}

// Run provokes each failure of a single server through stores made by
// s.Single, and checks its classification; the rows that say so run
// behind a breaker too ([CheckBreaker]). It also checks that a client
// trusting the CA of a TLS server decides.
func Run(t *testing.T, s Stores) {
	ca := redistest.NewCA(t, "sluice test CA")
	otherCA := redistest.NewCA(t, "another CA")
	for _, r := range rows(ca, otherCA) {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t, r.server...)
			d := Dial{Addr: srv.Addr()}
			if r.dial != nil {
				d = r.dial(srv)
			}
			if r.setup != nil {
				r.setup(t, srv)
			}
			req := Request("k")
			if r.alg != nil {
				req.Algorithm = r.alg
			}
			store := s.Single(t, d)
			err := failUntil(t, r.says, func(ctx context.Context) error {
				_, err := store.Apply(ctx, req)
				return err
			})
			Check(t, err, r.failure, s.types(r.name, r.types)...)
			if r.breaker {
				CheckBreaker(t, s.Single(t, d), req)
			}
		})
	}
	t.Run("TLS trusted", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t, redistest.WithTLS(ca))
		store := s.Single(t, Dial{Addr: srv.TLSAddr(), TLS: ca.ClientConfig()})
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		if d, err := store.Apply(ctx, Request("k")); err != nil || !d.Allowed {
			t.Errorf("over TLS with the server's CA: Apply = %+v, %v; want allowed", d, err)
		}
	})
}

// types returns the error.type values a row may have through s.
func (s Stores) types(name string, own []string) []string {
	if typ, ok := s.Types[name]; ok {
		return []string{typ}
	}
	return own
}

// failUntil calls call, each time under a new deadline, until it fails
// with an error that says says, and returns that error. The errors of the
// calls before the failure set in are logged. It fails the test if no
// call has within untilTimeout.
func failUntil(t testing.TB, says string, call func(context.Context) error) error {
	t.Helper()
	deadline := time.Now().Add(untilTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		err := call(ctx)
		cancel()
		if err != nil && strings.Contains(err.Error(), says) {
			return err
		}
		if time.Now().After(deadline) {
			t.Fatalf("no call failed saying %q within %v; the last returned %v", says, untilTimeout, err)
		}
		t.Logf("not yet: %v", err)
		time.Sleep(20 * time.Millisecond)
	}
}

// Check checks err's classification: a store failure (failure) is marked
// with core.ErrUnavailable, unless it is a timeout or a broken connection,
// which any store may return unmarked, and policy.IsStoreFailure counts
// it; a request's error is neither. telemetry.ErrorType must report one of
// types, if any are given. It logs err.
func Check(t testing.TB, err error, failure bool, types ...string) {
	t.Helper()
	t.Logf("error: %v", err)
	if err == nil {
		t.Fatal("no error")
	}
	typ := telemetry.ErrorType(err)
	generic := typ == telemetry.ErrorTypeTimeout || typ == telemetry.ErrorTypeConnection
	if marked := errors.Is(err, core.ErrUnavailable); marked != failure && !(failure && generic) {
		t.Errorf("errors.Is(err, core.ErrUnavailable) = %v, want %v", marked, failure)
	}
	if got := policy.IsStoreFailure(err); got != failure {
		t.Errorf("policy.IsStoreFailure(err) = %v, want %v", got, failure)
	}
	if len(types) > 0 && !slices.Contains(types, typ) {
		t.Errorf("telemetry.ErrorType(err) = %q, want one of %q", typ, types)
	}
}

// CheckBreaker puts a breaker in front of remote, a store whose every
// call fails as the store's failure, and calls it with req: in fail-open
// mode every decision must be allowed, in fail-closed mode denied, each
// marked with the mode's source and none with an error, and the breaker
// must count every call it made as a failure, then open its circuit. The
// breaker's deadline is a second, so that only the store's errors, never
// a slow machine, make the failures. Closing the breaker closes remote.
func CheckBreaker(t *testing.T, remote core.Store, req core.Request) {
	t.Helper()
	b, err := policy.NewBreaker(remote, policy.WithTimeout(time.Second), policy.WithMode(policy.FailOpen))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	closed, err := b.WithMode(policy.FailClosed)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ctx := context.Background()
	const n = 10
	for i := range n {
		d, err := b.Apply(ctx, req)
		if err != nil || !d.Allowed || d.Source != core.SourceFailOpen {
			t.Errorf("call %d, fail-open: %+v, %v; want allowed by %v, no error", i, d, err, core.SourceFailOpen)
		}
		d, err = closed.Apply(ctx, req)
		if err != nil || d.Allowed || d.Source != core.SourceFailClosed {
			t.Errorf("call %d, fail-closed: %+v, %v; want denied by %v, no error", i, d, err, core.SourceFailClosed)
		}
	}
	st, c := b.Stats(), b.Counts()
	t.Logf("breaker after %d calls: %+v, counts %+v, %v", 2*n, st, c, b.State())
	// A call whose deadline the process's stalls stretched past the
	// stall bound is excused, not counted; and a window (a second) that
	// passes during the calls forgets the failures before it.
	if st.Calls == 0 || st.Failures+st.Excused != st.Calls || st.Failures+st.Excused+st.Rejected != 2*n {
		t.Errorf("breaker stats %+v after %d calls: want every call made counted as a failure (or excused), the others rejected", st, 2*n)
	}
	if b.State() == policy.Closed && (c.Failures == 0 || c.Failures > uint32(st.Failures) || c.Successes != 0) {
		t.Errorf("closed circuit's counts %+v: want failures, at most the %d, and no success", c, st.Failures)
	}
	// The circuit does not trip within a tenth of its window (a second)
	// after NewBreaker, on the breaker's clock, which leaves out the
	// time the process did not run (a loaded machine's stalls); past it,
	// the next failure opens it, if the calls above, slow ones, have not
	// already. Calls every 10 ms from 150 ms on, for up to 10 s (a
	// loaded machine stalls), find it.
	time.Sleep(time.Until(start.Add(150 * time.Millisecond)))
	for b.State() != policy.Open && time.Since(start) < 10*time.Second {
		if d, err := b.Apply(ctx, req); err != nil || d.Source != core.SourceFailOpen {
			t.Errorf("call after the settling time: %+v, %v; want fail-open", d, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s := b.State(); s != policy.Open {
		t.Errorf("after %d failures the circuit is %v, want open", b.Stats().Failures, s)
	}
}

// closedPort returns a port of 127.0.0.1 that nothing listened on a
// moment ago.
func closedPort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// busy keeps srv in a script, from a connection of its own, until the
// test ends (SCRIPT KILL); it returns once srv answers BUSY.
func busy(t *testing.T, srv *redistest.Server) {
	done := make(chan error, 1)
	go func() {
		// 8 s: the harness's command timeout is 10 s.
		_, err := srv.Do("EVAL", redisfaults.BusyLua, "0", "8000000")
		done <- err
	}()
	t.Cleanup(func() {
		if _, err := srv.Do("SCRIPT", "KILL"); err != nil {
			t.Errorf("SCRIPT KILL: %v", err)
		}
		<-done
	})
	deadline := time.Now().Add(untilTimeout)
	for {
		_, err := srv.Do("PING")
		if err != nil && strings.HasPrefix(err.Error(), "BUSY") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server did not become busy: PING = %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// loading writes 1000 keys to srv, saves them, and restarts srv, which
// loads them for about a second (its key-load-delay), answering LOADING
// meanwhile. The test waits for the restart before it ends.
func loading(t *testing.T, srv *redistest.Server) {
	do(t, srv, "EVAL", "for i = 1, 1000 do redis.call('SET', 'junk:' .. i, i) end", "0")
	do(t, srv, "SAVE")
	done := make(chan error, 1)
	go func() { done <- srv.Restart() }()
	t.Cleanup(func() {
		if err := <-done; err != nil {
			t.Errorf("restart: %v", err)
		}
	})
}

// misconf has srv refuse writes (MISCONF): it saves snapshots, and its
// last one failed, as its file's name is taken by a directory (which
// fails the rename even for root).
func misconf(t *testing.T, srv *redistest.Server) {
	if err := os.MkdirAll(filepath.Join(srv.Dir(), "dump.rdb", "taken"), 0o755); err != nil {
		t.Fatal(err)
	}
	do(t, srv, "CONFIG", "SET", "save", "3600 1")
	do(t, srv, "BGSAVE")
	deadline := time.Now().Add(untilTimeout)
	for {
		info, err := do(t, srv, "INFO", "persistence").String()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(info, "rdb_last_bgsave_status:err") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the snapshot did not fail:\n%s", info)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
