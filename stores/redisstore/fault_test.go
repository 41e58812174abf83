package redisstore_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redisfaults"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores"
	"github.com/sluicehq/sluice/stores/internal/redisengine"
	"github.com/sluicehq/sluice/stores/redisstore"
)

// The helpers are package redisfaults', shared with rueidisstore; these
// tests supply the go-redis clients.

// TestScriptFlushUnderLoad decides with every algorithm on many keys from
// 16 goroutines while SCRIPT FLUSH empties the server's script cache every
// 500 ms: each call that meets NOSCRIPT must fall back to EVAL, and no
// caller may see an error. The server is the test's own, as SCRIPT FLUSH
// reaches every client.
func TestScriptFlushUnderLoad(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { client.Close() })
	t.Log(redisfaults.FlushUnderLoad(t, srv, newStore(t, client)))
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
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { client.Close() })
	b, err := policy.NewBreaker(newStore(t, client))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	r, stall := redisfaults.FlushThroughBreaker(t, srv, b, policy.DefaultTimeout, func() uint64 { return b.Stats().Changes })
	t.Logf("%v; the breaker answered %d of %d calls by its mode (timeouts); the process stalled at most %v", r, b.Stats().Failures, b.Stats().Calls, stall)
}

// TestTimedOutCallNotReplayed makes a call that times out after 50 ms
// while the server cannot answer, through a client that does not retry
// (MaxRetries -1) and bounds its reads by the context
// (ContextTimeoutEnabled): the caller gets an error within the deadline,
// and the key shows the decision applied at most once. The server is the
// test's own, as CLIENT PAUSE and a busy server reach every client.
func TestTimedOutCallNotReplayed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	store := newStore(t, client)
	timeout := redisfaults.TimeoutContexts(t, 50*time.Millisecond)

	// CLIENT PAUSE 400 ALL: the server reads the call and holds it until
	// the pause ends. The caller gives up at its deadline; its call stays
	// in its pipeline, which keeps its connection, and runs once the pause
	// ends: 4 remain. A replay would leave 3 or less.
	t.Run("pause", func(t *testing.T) {
		r := redisfaults.PausedCall(t, srv, store, "paused", timeout, nil)
		t.Logf("the caller got %q (%s); then %d remaining", r.Err, redisfaults.DescribeTimeout(r.Err), r.Remaining)
		if r.Remaining != 4 {
			t.Errorf("after the timed-out call, Remaining = %d, want 4 (applied once, by its pipeline); 3 or less is a replay", r.Remaining)
		}
	})

	// A server busy in another client's script: the call waits in the
	// server's socket buffer, and runs when the script is done, after the
	// caller gave up. Applied exactly once: 4 remain; a replay leaves 3.
	// The pool's connections are opened first, 8 at once.
	t.Run("busy", func(t *testing.T) {
		redisfaults.CheckBusyTimedOut(t, srv, store, timeout, nil)
	})
}

// TestNoReplay checks that no go-redis client, whatever its retry
// options, runs a decision twice when its reply times out. Each client's
// reads are bounded by its ReadTimeout (50 ms), the calls' contexts have no
// deadline, and the server is busy for 300 ms, so every attempt a client
// makes is received and, once the server is free, run. The control, the
// same script sent with a plain go-redis command through a default client,
// must be replayed, or the harness proves nothing.
func TestNoReplay(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	addr := srv.Addr()
	// A Cluster client over the one server, which holds every slot.
	slots := func(context.Context) ([]redis.ClusterSlot, error) {
		return []redis.ClusterSlot{{Start: 0, End: redistest.NumSlots - 1, Nodes: []redis.ClusterNode{{Addr: addr}}}}, nil
	}
	const readTimeout = 50 * time.Millisecond
	clients := []struct {
		name   string
		client func() redis.UniversalClient
	}{
		{"Client default", func() redis.UniversalClient {
			return redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: readTimeout})
		}},
		{"Client MaxRetries 5", func() redis.UniversalClient {
			return redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: readTimeout, MaxRetries: 5})
		}},
		{"Client MaxRetries -1", func() redis.UniversalClient {
			return redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: readTimeout, MaxRetries: -1})
		}},
		{"ClusterClient default", func() redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{ClusterSlots: slots, ReadTimeout: readTimeout})
		}},
		{"ClusterClient MaxRetries -1", func() redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{ClusterSlots: slots, ReadTimeout: readTimeout, MaxRetries: -1})
		}},
	}
	for _, tt := range clients {
		t.Run(tt.name, func(t *testing.T) {
			client := tt.client()
			t.Cleanup(func() { client.Close() })
			store, err := redisstore.New(client, redisstore.Config{Prefix: prefixFor(t)})
			if err != nil {
				t.Fatal(err)
			}
			r := redisfaults.BusyCall(t, srv, store, context.Background, nil)
			if runs := 5 - r.Remaining; runs != 1 {
				t.Errorf("the call ran %d times, want once", runs)
			}
		})
	}
	t.Run("control", func(t *testing.T) {
		client := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: readTimeout})
		t.Cleanup(func() { client.Close() })
		store, err := redisstore.New(client, redisstore.Config{Prefix: prefixFor(t)})
		if err != nil {
			t.Fatal(err)
		}
		// The store's own reads, and a plain EVALSHA for the call.
		plain := stores.Func(func(ctx context.Context, req core.Request) (core.Decision, error) {
			if req.Op == core.OpPeek {
				return store.Apply(ctx, req)
			}
			script := algorithms.TokenBucket.(algorithms.Scripted).Script()
			key := redisengine.Key(store.Prefix(), req.Key, algorithms.TokenBucket.Name())
			args := string(redisengine.AppendArgs(nil, &req))
			return core.Decision{}, client.EvalSha(ctx, script.Hash(), []string{key}, args).Err()
		})
		// The plain command needs a connection of its own that is open
		// before the server is busy: its handshake would time out.
		warm := func(t testing.TB, _ core.Store, key string) {
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					if err := client.Ping(context.Background()).Err(); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			if n := redisfaults.RemainingOf(t, store, key); n != 5 {
				t.Fatalf("%d remaining before the call, want 5", n)
			}
		}
		r := redisfaults.BusyCall(t, srv, plain, context.Background, warm)
		if runs := 5 - r.Remaining; runs < 2 {
			t.Errorf("a plain go-redis EVALSHA ran %d times: the harness no longer sees go-redis's replays", runs)
		}
	})
}

// TestMalformedReplies runs scripts whose replies break the calling
// convention: each call returns an error and a zero Decision, never a
// panic. An error wraps redisengine.ErrMalformed where the reply is not ten
// packed integers a decision can hold, else it says what the server said.
func TestMalformedReplies(t *testing.T) {
	t.Parallel()
	client := redis.NewClient(&redis.Options{Addr: testAddr(t), MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	store := newStore(t, client)
	for i, tt := range redisfaults.MalformedCases(nil) {
		t.Run(tt.Name, func(t *testing.T) {
			redisfaults.CheckMalformed(t, store, fmt.Sprintf("bad-%d", i), tt)
		})
	}
}

// countHook counts the dials and commands of a go-redis client.
type countHook struct{ n atomic.Int64 }

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		h.n.Add(1)
		return next(ctx, network, addr)
	}
}

func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// TestUnsupportedAlgorithm checks that an algorithm without a Lua twin
// fails with core.ErrUnsupported before any call to Redis: the client's
// hook counts no dial and no command.
func TestUnsupportedAlgorithm(t *testing.T) {
	t.Parallel()
	client := redis.NewClient(&redis.Options{Addr: testAddr(t), MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	hook := &countHook{}
	client.AddHook(hook)
	redisfaults.CheckUnsupported(t, newStore(t, client), hook.n.Load, "dials and commands")
}

// TestHealing overwrites keys with values of other clients (wrong types,
// lengths and numbers): each decision on such a key is a fresh key's, and
// the key is left with a TTL or gone.
func TestHealing(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	// A prefix of its own a run: the server is shared, and -count reruns.
	prefix := fmt.Sprintf("heal%d:", prefixes.Add(1))
	store, err := redisstore.New(client, redisstore.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	redisfaults.CheckHealing(t, srv, store, store)
}
