package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/stores/redisstore"
)

// TestScriptFlushUnderLoad decides with every algorithm on many keys from
// 16 goroutines while SCRIPT FLUSH empties the server's script cache every
// 500 ms: each call that meets NOSCRIPT must fall back to EVAL, and no
// caller may see an error. The server is the test's own, as SCRIPT FLUSH
// reaches every client.
func TestScriptFlushUnderLoad(t *testing.T) {
	t.Parallel()
	for _, pipeline := range []bool{false, true} {
		t.Run(fmt.Sprintf("pipeline=%v", pipeline), func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			t.Cleanup(func() { client.Close() })
			r := flushUnderLoad(t, srv, newStore(t, client, pipeline))
			t.Logf("%d decisions (%d allowed), %d errors, %d flushes; server: %d EVAL, %d EVALSHA, %d NOSCRIPT",
				r.decisions, r.allowed, r.errors, r.flushes, r.eval, r.evalsha, r.noscript)
		})
	}
}

// flushResult is what flushUnderLoad saw.
type flushResult struct {
	decisions, allowed, errors int64
	flushes                    int   // SCRIPT FLUSHes sent while deciding
	eval, evalsha, noscript    int64 // the server's counts, from its INFO
}

// flushUnderLoad is TestScriptFlushUnderLoad for store, a store on srv, a
// server of the test's own.
func flushUnderLoad(t *testing.T, srv *redistest.Server, store core.Store) flushResult {
	t.Helper()
	const (
		goroutines = 16
		keys       = 64
		load       = 2500 * time.Millisecond
		every      = 500 * time.Millisecond
	)
	algs := algorithms.All()
	limit := core.PerSecond(50)
	ctx := context.Background()
	// Load every script and open a connection, then zero the server's
	// statistics: every EVAL counted from here on is a fallback.
	for _, alg := range algs {
		if _, err := store.Apply(ctx, core.Request{Key: "warm", Algorithm: alg, Limit: limit, Cost: 1, Peek: true}); err != nil {
			t.Fatalf("%s: warm-up: %v", alg.Name(), err)
		}
	}
	if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
		t.Fatal(err)
	}

	var r flushResult
	var decisions, allowed, failures atomic.Int64
	var firstErrs sync.Map // the first error of each goroutine that failed
	start := time.Now()
	end := start.Add(load)
	stop := make(chan struct{})
	flushed := make(chan int)
	go func() {
		// Flush only while at least one period of load remains, so that
		// every flush is followed by calls that need its fallback.
		n := 0
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				flushed <- n
				return
			case <-tick.C:
				if time.Until(end) < every {
					continue
				}
				if _, err := srv.Do("SCRIPT", "FLUSH"); err != nil {
					t.Errorf("SCRIPT FLUSH: %v", err)
					continue
				}
				n++
			}
		}
	}()
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for i := 0; time.Now().Before(end); i++ {
				alg := algs[(g+i)%len(algs)]
				req := core.Request{
					Key:       "k" + strconv.Itoa(rng.IntN(keys)),
					Algorithm: alg,
					Limit:     limit,
					Cost:      1 + rng.Int64N(3),
				}
				d, err := store.Apply(ctx, req)
				if err != nil {
					if failures.Add(1) <= 5 {
						firstErrs.Store(fmt.Sprintf("goroutine %d call %d", g, i), fmt.Errorf("Apply(%s, %s): %w", alg.Name(), req.Key, err))
					}
					continue
				}
				decisions.Add(1)
				if d.Allowed {
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	r.flushes = <-flushed
	r.decisions, r.allowed, r.errors = decisions.Load(), allowed.Load(), failures.Load()
	firstErrs.Range(func(k, v any) bool {
		t.Errorf("%s: %v", k, v)
		return true
	})

	stats := info(t, srv, "commandstats")
	r.eval = infoCount(stats, "cmdstat_eval", "calls")
	r.evalsha = infoCount(stats, "cmdstat_evalsha", "calls")
	r.noscript = infoCount(info(t, srv, "errorstats"), "errorstat_NOSCRIPT", "count")

	if r.errors != 0 {
		t.Errorf("%d of %d calls failed, want none", r.errors, r.errors+r.decisions)
	}
	if r.flushes < 3 {
		t.Errorf("%d SCRIPT FLUSHes while deciding, want at least 3", r.flushes)
	}
	if r.decisions < goroutines {
		t.Errorf("%d decisions, want at least %d", r.decisions, goroutines)
	}
	// Every flush is followed by at least one call, which meets NOSCRIPT
	// and falls back to EVAL; no EVAL happens otherwise.
	if r.eval < int64(r.flushes) || r.noscript < int64(r.flushes) {
		t.Errorf("after %d flushes the server counted %d EVAL and %d NOSCRIPT, want at least one each per flush: the fallback did not run",
			r.flushes, r.eval, r.noscript)
	}
	return r
}

// info returns the server's INFO section.
func info(t *testing.T, srv *redistest.Server, section string) string {
	t.Helper()
	reply, err := srv.Do("INFO", section)
	if err != nil {
		t.Fatal(err)
	}
	s, err := reply.String()
	if err != nil {
		t.Fatalf("INFO %s: %v", section, err)
	}
	return s
}

// infoCount returns field of the line "name:field=N,..." of an INFO
// section, or 0 if there is no such line.
func infoCount(info, name, field string) int64 {
	for line := range strings.Lines(info) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), name+":")
		if !ok {
			continue
		}
		for kv := range strings.SplitSeq(rest, ",") {
			if v, ok := strings.CutPrefix(kv, field+"="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
	}
	return 0
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
	store := newStore(t, client, false)
	timeout := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		t.Cleanup(cancel)
		return ctx
	}

	// CLIENT PAUSE 400 ALL: the server reads the call and holds it until
	// the pause ends. go-redis closes a connection whose read timed out,
	// and the server drops a paused client's pending command when its
	// connection closes, so the decision is never applied: 5 remain. A
	// client that kept the connection would leave 4; a replay, 3 or less.
	t.Run("pause", func(t *testing.T) {
		remaining, err := pausedCall(t, srv, store, "paused", timeout)
		t.Logf("the caller got %q (%s); then %d remaining", err, describeTimeout(err), remaining)
		if remaining != 5 {
			t.Errorf("after the timed-out call, Remaining = %d, want 5 (dropped with its connection); 4 is applied once, 3 or less a replay", remaining)
		}
	})

	// A server busy in another client's script: the call waits in the
	// server's socket buffer, and runs when the script is done, after the
	// caller gave up. Applied exactly once: 4 remain; a replay leaves 3.
	t.Run("busy", func(t *testing.T) {
		r := busyCall(t, srv, store, timeout)
		checkTimedOut(t, r.d, r.err, r.took, 250*time.Millisecond)
		t.Logf("the caller got %q (%s); then %d remaining", r.err, describeTimeout(r.err), r.remaining)
		if r.remaining != 4 {
			t.Errorf("after the timed-out call, Remaining = %d, want 4: applied once (5: never applied, 3 or less: replayed)", r.remaining)
		}
	})
}

// The timed-out call: a token bucket of burst 5 that does not refill
// during the test, charged 1.
var timedOutReq = core.Request{Algorithm: algorithms.TokenBucket, Limit: core.PerHour(1).WithBurst(5), Cost: 1}

// remainingOf returns the tokens left in key's bucket of timedOutReq.
func remainingOf(t *testing.T, store core.Store, key string) int64 {
	t.Helper()
	peek := timedOutReq
	peek.Key, peek.Peek = key, true
	d, err := store.Apply(context.Background(), peek)
	if err != nil {
		t.Fatalf("Apply(peek %s): %v", key, err)
	}
	// A peek of cost 1 reports what would remain after charging it; a
	// denial, what remains.
	if d.Allowed {
		return d.Remaining + 1
	}
	return d.Remaining
}

// pausedCall pauses srv's clients for 400 ms and makes a call on key with
// the context ctx returns, which must time out within the pause. It waits
// until 600 ms after the pause began and returns the key's remaining
// tokens and the error the caller got.
func pausedCall(t *testing.T, srv *redistest.Server, store core.Store, key string, ctx func() context.Context) (int64, error) {
	t.Helper()
	const (
		pause  = 400 * time.Millisecond
		settle = 600 * time.Millisecond // from the pause to the check
	)
	// Load the script and open a connection before the pause.
	if n := remainingOf(t, store, key); n != 5 {
		t.Fatalf("%d remaining before the pause, want 5", n)
	}
	if _, err := srv.Do("CLIENT", "PAUSE", strconv.Itoa(int(pause/time.Millisecond)), "ALL"); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	req := timedOutReq
	req.Key = key
	d, callErr := store.Apply(ctx(), req)
	took := time.Since(paused)
	checkTimedOut(t, d, callErr, took, pause)
	time.Sleep(time.Until(paused.Add(settle)))
	return remainingOf(t, store, key), callErr
}

// checkTimedOut checks the answer to a call that had to time out before
// the server could answer, after limit.
func checkTimedOut(t *testing.T, d core.Decision, err error, took, limit time.Duration) {
	t.Helper()
	switch {
	case err == nil:
		t.Fatalf("Apply while the server could not answer = %+v, nil; want an error", d)
	case d != core.Decision{}:
		t.Errorf("Apply while the server could not answer = %+v, %v; want a zero Decision with the error", d, err)
	}
	if took >= limit {
		t.Errorf("Apply returned after %v, once the server could answer again (%v): its deadline did not bound it", took, limit)
	}
}

// busyLua keeps the server in a loop for ARGV[1] µs and returns the
// instant, in µs since the Unix epoch, it began. The loop is also bounded
// by a count, in case TIME stood still within a script.
const busyLua = `
local function now()
	local t = redis.call('TIME')
	return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local t0 = now()
local i = 0
while now() - t0 < tonumber(ARGV[1]) and i < 100000000 do
	i = i + 1
end
return t0`

// busyResult is what busyCall saw.
type busyResult struct {
	remaining int64         // the key's tokens afterwards, of 5
	d         core.Decision // the call's answer
	err       error
	took      time.Duration // from sending the call to its return
}

// busyCall keeps srv busy in a 300 ms script from a connection of its own,
// and makes a call on a fresh key from the store meanwhile, with the
// context ctx returns. It waits until the call returned, the script ended
// and the server has had time to run what it received, and returns the
// key's remaining tokens and the call's answer. A call that reached the
// server before the script began proves nothing; busyCall then tries
// again, up to 3 times. Before the call, it opens 8 connections, so that a
// client that retries finds one ready while the server is busy (a new
// connection's handshake would time out first).
func busyCall(t *testing.T, srv *redistest.Server, store core.Store, ctx func() context.Context) busyResult {
	t.Helper()
	const (
		busy   = 300 * time.Millisecond
		lead   = 50 * time.Millisecond  // from sending the script to the call
		settle = 100 * time.Millisecond // after the script and the call
	)
	for attempt := 1; ; attempt++ {
		key := fmt.Sprintf("busy%d", attempt)
		// Load the script and open connections first.
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				if n := remainingOf(t, store, key); n != 5 {
					t.Errorf("%d remaining before the call, want 5", n)
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		type result struct {
			began time.Time
			err   error
		}
		done := make(chan result, 1)
		go func() {
			r, err := srv.Do("EVAL", busyLua, "0", strconv.FormatInt(busy.Microseconds(), 10))
			if err != nil {
				done <- result{err: err}
				return
			}
			us, err := r.Int()
			done <- result{time.UnixMicro(us), err}
		}()
		time.Sleep(lead)
		req := timedOutReq
		req.Key = key
		sent := time.Now()
		var r busyResult
		r.d, r.err = store.Apply(ctx(), req)
		r.took = time.Since(sent)
		script := <-done
		if script.err != nil {
			t.Fatalf("the busy script: %v", script.err)
		}
		if script.began.After(sent) {
			// The script started only after the call was sent, so the
			// call may have been answered at once.
			t.Logf("attempt %d: the busy script began %v after the call was sent; again", attempt, script.began.Sub(sent))
			if attempt == 3 {
				t.Fatal("the busy script never began before the call")
			}
			continue
		}
		t.Logf("Apply returned after %v: %+v, %v", r.took.Round(time.Millisecond), r.d, r.err)
		time.Sleep(settle)
		r.remaining = remainingOf(t, store, key)
		return r
	}
}

// describeTimeout says how err reports a timeout.
func describeTimeout(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "wraps context.DeadlineExceeded"
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Sprintf("a timeout, %T with Timeout() true, not wrapping context.DeadlineExceeded", ne)
	}
	return "neither context.DeadlineExceeded nor a timeout"
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
			r := busyCall(t, srv, store, context.Background)
			if runs := 5 - r.remaining; runs != 1 {
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
		plain := core.StoreFunc(func(ctx context.Context, req core.Request) (core.Decision, error) {
			if req.Peek {
				return store.Apply(ctx, req)
			}
			script := algorithms.TokenBucket.(core.Scripted).Script()
			key := wire.Key(store.Prefix(), req.Key, algorithms.TokenBucket.Name())
			args := string(wire.AppendArgs(nil, &req))
			return core.Decision{}, client.EvalSha(ctx, script.Hash(), []string{key}, args).Err()
		})
		r := busyCall(t, srv, plain, context.Background)
		if runs := 5 - r.remaining; runs < 2 {
			t.Errorf("a plain go-redis EVALSHA ran %d times: the harness no longer sees go-redis's replays", runs)
		}
	})
}

// scripted is a Lua algorithm for tests: the token bucket's name checks
// and transition with another name and script.
type scripted struct {
	core.Algorithm
	name   string
	script *core.Script
}

func (a scripted) Name() string         { return a.name }
func (a scripted) Script() *core.Script { return a.script }

func newScripted(name, src string) scripted {
	return scripted{Algorithm: algorithms.TokenBucket, name: name, script: core.NewScript(src)}
}

var _ core.Scripted = scripted{}

// malformed are scripts whose replies break the calling convention, with
// what redisstore must return for each: an error wrapping
// wire.ErrMalformed where the reply is not five integers a decision can
// hold, else an error that says what the server said.
var malformed = []struct {
	name, src string
	malformed bool   // the error wraps wire.ErrMalformed
	says      string // and the error's text contains this
}{
	{"two-integers", "return {1, 2}", true, ""},
	{"string", "return 'text'", true, ""},
	{"string-element", "return {1, 2, 3, 4, 'x'}", true, ""},
	{"nil", "return nil", true, ""},
	{"allowed-2", "return {2, 1, 1, 0, 0}", true, "allowed is 2"},
	{"allowed-with-retry", "return {1, 10, 9, 5, 0}", true, "allowed with retry-after"},
	{"negative-retry", "return {0, 10, 9, -7, 0}", true, "retry-after -7"},
	{"huge-retry", "return {0, 10, 9, 1e300, 0}", true, "retry-after"},
	{"error-reply", "return redis.error_reply('boom')", false, "boom"},
	{"runtime-error", "error('oops')", false, "oops"},
	{"nested", "return { {1}, 2, 3, 4, 5 }", true, ""},
}

// TestMalformedReplies runs scripts whose replies break the calling
// convention: each call returns an error and a zero Decision, never a
// panic.
func TestMalformedReplies(t *testing.T) {
	t.Parallel()
	client := redis.NewClient(&redis.Options{Addr: testAddr(t), MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	store := newStore(t, client, false)
	for i, tt := range malformed {
		t.Run(tt.name, func(t *testing.T) {
			alg := newScripted(fmt.Sprintf("bad-%d", i), tt.src)
			d, err := applyNoPanic(t, store, core.Request{Key: "k", Algorithm: alg, Limit: core.PerSecond(10), Cost: 1})
			t.Logf("%s: %v", tt.src, err)
			checkMalformed(t, tt.src, d, err, tt.malformed, tt.says)
		})
	}
}

// applyNoPanic calls store.Apply, failing t if it panics.
func applyNoPanic(t *testing.T, store core.Store, req core.Request) (d core.Decision, err error) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("Apply panicked: %v", p)
		}
	}()
	return store.Apply(context.Background(), req)
}

// checkMalformed checks Apply's answer to the script src.
func checkMalformed(t *testing.T, src string, d core.Decision, err error, malformed bool, says string) {
	t.Helper()
	if err == nil {
		t.Fatalf("Apply with %q = %+v, nil; want an error", src, d)
	}
	if d != (core.Decision{}) {
		t.Errorf("Apply with %q = %+v with its error; want a zero Decision", src, d)
	}
	if errors.Is(err, wire.ErrMalformed) != malformed {
		t.Errorf("Apply with %q: errors.Is(%v, wire.ErrMalformed) = %v, want %v", src, err, !malformed, malformed)
	}
	if !strings.Contains(err.Error(), says) {
		t.Errorf("Apply with %q: error %q does not say %q", src, err, says)
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

// unscripted is the token bucket without its Lua twin: embedding the
// interface keeps only core.Algorithm's methods.
type unscripted struct{ core.Algorithm }

// TestUnsupportedAlgorithm checks that an algorithm without a Lua twin
// fails with core.ErrUnsupported before any call to Redis.
func TestUnsupportedAlgorithm(t *testing.T) {
	t.Parallel()
	client := redis.NewClient(&redis.Options{Addr: testAddr(t), MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	hook := &countHook{}
	client.AddHook(hook)
	store := newStore(t, client, false)
	alg := unscripted{algorithms.TokenBucket}
	if _, ok := core.Algorithm(alg).(core.Scripted); ok {
		t.Fatal("unscripted is core.Scripted")
	}
	d, err := applyNoPanic(t, store, core.Request{Key: "k", Algorithm: alg, Limit: core.PerSecond(10), Cost: 1})
	if !errors.Is(err, core.ErrUnsupported) || d != (core.Decision{}) {
		t.Errorf("Apply(%s without a script) = %+v, %v; want a zero Decision and an error wrapping core.ErrUnsupported", alg.Name(), d, err)
	}
	if n := hook.n.Load(); n != 0 {
		t.Errorf("Apply without a script made %d dials and commands, want none", n)
	}
	t.Logf("error: %v", err)
	// The hook sees the store's calls: a scripted algorithm is counted.
	if _, err := store.Apply(context.Background(), core.Request{Key: "k", Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(10), Cost: 1}); err != nil {
		t.Fatal(err)
	}
	if hook.n.Load() == 0 {
		t.Fatal("the hook counted no call for a scripted algorithm")
	}
}
