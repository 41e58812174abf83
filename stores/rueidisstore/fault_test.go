package rueidisstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redisfaults"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/rueidisstore"
)

// The helpers are package redisfaults', shared with redisstore; these
// tests supply the rueidis client, and the expectations differ where the
// clients do.

// TestScriptFlushUnderLoad decides with every algorithm on many keys from
// 16 goroutines while SCRIPT FLUSH empties the server's script cache every
// 500 ms: each call that meets NOSCRIPT must fall back to EVAL, and no
// caller may see an error. The server is the test's own, as SCRIPT FLUSH
// reaches every client.
func TestScriptFlushUnderLoad(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	t.Log(redisfaults.FlushUnderLoad(t, srv, newStore(t, newClient(t, srv.Addr()))))
}

// TestScriptFlushThroughBreaker is TestScriptFlushUnderLoad behind a
// breaker with the default 8 ms deadline: a NOSCRIPT answered by
// EVAL is no failure, so the circuit never leaves its closed state, unless
// the test process stalled four deadlines or more meanwhile (a canary
// watches). Calls the machine holds past the deadline are answered by
// the mode, counted and logged.
func TestScriptFlushThroughBreaker(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	b, err := policy.NewBreaker(newStore(t, newClient(t, srv.Addr())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	r, stall := redisfaults.FlushThroughBreaker(t, srv, b, policy.DefaultTimeout, func() uint64 { return b.Stats().Changes })
	t.Logf("%v; the breaker answered %d of %d calls by its mode (timeouts); the process stalled at most %v", r, b.Stats().Failures, b.Stats().Calls, stall)
}

// TestTimedOutCallNotReplayed makes a call that times out after 50 ms
// while the server cannot answer: the caller gets an error within the
// deadline, and the key shows the decision applied at most once. rueidis
// retries only read-only commands, so it never sends the call twice; what
// becomes of the one it sent depends on the server and on the connection.
// The server is the test's own, as CLIENT PAUSE and a busy server reach
// every client.
func TestTimedOutCallNotReplayed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	store := newStore(t, newClient(t, srv.Addr()))
	timeout := redisfaults.TimeoutContexts(t, 50*time.Millisecond)
	// CLIENT PAUSE 400 ALL: the server reads the call and holds it until
	// the pause ends. A connection used by one caller at a time (as here)
	// is closed when its call's deadline passes, and the server drops a
	// paused client's pending command when its connection closes: 5
	// remain. A connection shared by concurrent callers is kept, and the
	// call runs when the pause ends: 4 remain. Either way, never 3.
	t.Run("pause", func(t *testing.T) {
		r := redisfaults.PausedCall(t, srv, store, "paused", timeout, warm)
		t.Logf("Apply returned after %v: %+v, %v", r.Took.Round(time.Millisecond), r.D, r.Err)
		t.Logf("the caller got %q (%s); then %d remaining", r.Err, redisfaults.DescribeTimeout(r.Err), r.Remaining)
		if r.Remaining != 4 && r.Remaining != 5 {
			t.Errorf("after the timed-out call, Remaining = %d, want 5 (dropped with its connection) or 4 (applied once); 3 or less is a replay", r.Remaining)
		}
	})
	// A server busy in another client's script for 300 ms: the call waits
	// in the server's socket buffer, and runs when the script is done,
	// after the caller gave up, whether or not the connection was closed
	// meanwhile. Applied exactly once: 4 remain; a replay leaves 3.
	t.Run("busy", func(t *testing.T) {
		redisfaults.CheckBusyTimedOut(t, srv, store, timeout, warm)
	})
}

// warmPeeks is how many peeks open a rueidis client's connections before
// a call that must time out. rueidis sends each keyed command over one of
// its 2^PipelineMultiplex connections (2 to 4 by default) picked at
// random, dialling it on first use: a call that lands on a connection
// still to be dialled times out in the handshake and is never sent, which
// would hide what the test looks for. 64 random picks leave one of 4
// connections undialled with a chance of about 4·(3/4)^64 ≈ 4·10⁻⁸.
const warmPeeks = 64

// warm is the rueidis client's [redisfaults.Warm]: it opens the store's
// connections with peeks of key, checking that its bucket is full.
func warm(t testing.TB, store core.Store, key string) {
	t.Helper()
	for range warmPeeks {
		if n := redisfaults.RemainingOf(t, store, key); n != 5 {
			t.Fatalf("%d remaining before the call, want 5", n)
		}
	}
}

// TestMalformedReplies runs scripts whose replies break the calling
// convention: each call returns an error and a zero Decision, never a
// panic. An error wraps redisengine.ErrMalformed where the reply is not ten
// packed integers a decision can hold, else it says what the server said.
func TestMalformedReplies(t *testing.T) {
	t.Parallel()
	store := newStore(t, newClient(t, testAddr(t)))
	for i, tt := range redisfaults.MalformedCases(nil) {
		t.Run(tt.Name, func(t *testing.T) {
			redisfaults.CheckMalformed(t, store, fmt.Sprintf("bad-%d", i), tt)
		})
	}
}

// countingClient is a rueidis client that counts the commands sent
// through it.
type countingClient struct {
	rueidis.Client
	n atomic.Int64
}

func (c *countingClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.n.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c *countingClient) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	c.n.Add(int64(len(cmds)))
	return c.Client.DoMulti(ctx, cmds...)
}

// TestUnsupportedAlgorithm checks that an algorithm without a Lua twin
// fails with core.ErrUnsupported before any call to Redis: the counting
// client sends no command.
func TestUnsupportedAlgorithm(t *testing.T) {
	t.Parallel()
	client := &countingClient{Client: newClient(t, testAddr(t))}
	redisfaults.CheckUnsupported(t, newStore(t, client), client.n.Load, "commands")
}

// TestHealing overwrites keys with values of other clients (wrong types,
// lengths and numbers): each decision on such a key is a fresh key's, and
// the key is left with a TTL or gone.
func TestHealing(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	// A prefix of its own a run: the server is shared, and -count reruns.
	prefix := fmt.Sprintf("heal%d:", prefixes.Add(1))
	store, err := rueidisstore.New(newClient(t, srv.Addr()), rueidisstore.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	redisfaults.CheckHealing(t, srv, store, store)
}
