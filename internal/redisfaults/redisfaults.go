package redisfaults

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/redisstore"
)

// FlushResult is what [FlushUnderLoad] saw.
type FlushResult struct {
	Decisions, Allowed, Errors int64 // the calls that were decided, allowed, failed
	Flushes                    int   // SCRIPT FLUSHes sent while deciding
	Eval, EvalSHA, NoScript    int64 // the server's counts, from its INFO
	MostCharged, Bound         int64 // the most cost one key and algorithm admitted, and its limit's bound
}

// String returns the line a test logs, such as "38611 decisions (25772
// allowed), 0 errors, 3 flushes; server: 49 EVAL, 38611 EVALSHA, 49
// NOSCRIPT".
func (r FlushResult) String() string {
	return fmt.Sprintf("%d decisions (%d allowed), %d errors, %d flushes; server: %d EVAL, %d EVALSHA, %d NOSCRIPT; at most %d charged to a key (bound %d)",
		r.Decisions, r.Allowed, r.Errors, r.Flushes, r.Eval, r.EvalSHA, r.NoScript, r.MostCharged, r.Bound)
}

// chargeTally sums the cost admitted per key and algorithm.
type chargeTally struct {
	mu sync.Mutex
	m  map[string]int64
}

func (c *chargeTally) add(req core.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int64{}
	}
	c.m[req.Key+" "+req.Algorithm.Name()] += req.Cost
}

func (c *chargeTally) all() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m
}

// FlushUnderLoad decides with every algorithm on 8 keys from 16
// goroutines for 5 seconds, every third call a stack of two rules
// (ApplyAll), while SCRIPT FLUSH empties srv's script cache every 500 ms:
// each call that meets NOSCRIPT must fall back to EVAL, no caller may see
// an error, and no key may admit more than its limit allows over the
// load (burst + rate × (span + a period), a window's boundary included). store is a store on srv, a server of the
// test's own, as SCRIPT FLUSH reaches every client. FlushUnderLoad resets
// srv's statistics (CONFIG RESETSTAT) after a warm-up and fails t unless
// there were at least 5 flushes, each followed by an EVAL and a NOSCRIPT.
func FlushUnderLoad(t testing.TB, srv *redistest.Server, store core.Store) FlushResult {
	t.Helper()
	const (
		goroutines = 16
		keys       = 8 // few enough that every key is at its limit
		load       = 5 * time.Second
		every      = 500 * time.Millisecond
	)
	algs := algorithms.All()
	limit := core.PerSecond(50)
	ctx := context.Background()
	// Load every script and open a connection, then zero the server's
	// statistics: every EVAL counted from here on is a fallback.
	for _, alg := range algs {
		if _, err := store.Apply(ctx, core.Request{Key: "warm", Cost: 1, Op: core.OpPeek, Terms: &core.Terms{Algorithm: alg, Limit: limit}}); err != nil {
			t.Fatalf("%s: warm-up: %v", alg.Name(), err)
		}
	}
	if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
		t.Fatal(err)
	}

	var r FlushResult
	var decisions, allowed, failures atomic.Int64
	var charged chargeTally
	var firstErrs sync.Map // the first errors, by goroutine and call
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
					Key:   "k" + strconv.Itoa(rng.IntN(keys)),
					Cost:  1 + rng.Int64N(3),
					Terms: &core.Terms{Algorithm: alg, Limit: limit},
				}
				if i%3 == 2 {
					// A stack of two rules on the key: MultiScript, whose
					// NOSCRIPT falls back to EVAL as a single script's.
					reqs := []core.Request{req, req}
					reqs[0].Terms = &core.Terms{Algorithm: algorithms.TokenBucket, Limit: limit}
					reqs[1].Terms = &core.Terms{Algorithm: algorithms.SlidingWindowLog, Limit: limit}
					out := make([]core.Decision, 2)
					if err := store.ApplyAll(ctx, reqs, out); err != nil {
						if failures.Add(1) <= 5 {
							firstErrs.Store(fmt.Sprintf("goroutine %d call %d", g, i), fmt.Errorf("ApplyAll(%s): %w", req.Key, err))
						}
						continue
					}
					decisions.Add(1)
					if out[0].Allowed && out[1].Allowed && out[0].Source == core.SourceStore {
						allowed.Add(1)
						for _, q := range reqs {
							charged.add(q)
						}
					}
					continue
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
					if d.Source == core.SourceStore {
						charged.add(req)
					}
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	r.Flushes = <-flushed
	r.Decisions, r.Allowed, r.Errors = decisions.Load(), allowed.Load(), failures.Load()
	firstErrs.Range(func(k, v any) bool {
		t.Errorf("%s: %v", k, v)
		return true
	})

	stats := Info(t, srv, "commandstats")
	r.Eval = InfoCount(stats, "cmdstat_eval", "calls")
	r.EvalSHA = InfoCount(stats, "cmdstat_evalsha", "calls")
	r.NoScript = InfoCount(Info(t, srv, "errorstats"), "errorstat_NOSCRIPT", "count")

	if r.Errors != 0 {
		t.Errorf("%d of %d calls failed, want none", r.Errors, r.Errors+r.Decisions)
	}
	// No key admitted more than its limit over the load: a fallback that
	// ran a decision twice would.
	span := time.Since(start)
	bound := limit.Burst() + int64((span.Seconds()/limit.Period().Seconds()+1)*float64(limit.Rate()))
	for k, n := range charged.all() {
		r.MostCharged = max(r.MostCharged, n)
		if n > bound {
			t.Errorf("%s: %d charged over %v, more than the limit's %d", k, n, span.Round(time.Millisecond), bound)
		}
	}
	r.Bound = bound
	if r.Flushes < 5 {
		t.Errorf("%d SCRIPT FLUSHes while deciding, want at least 5", r.Flushes)
	}
	if r.Decisions < goroutines {
		t.Errorf("%d decisions, want at least %d", r.Decisions, goroutines)
	}
	// Every flush is followed by at least one call, which meets NOSCRIPT
	// and falls back to EVAL; no EVAL happens otherwise.
	if r.Eval < int64(r.Flushes) || r.NoScript < int64(r.Flushes) {
		t.Errorf("after %d flushes the server counted %d EVAL and %d NOSCRIPT, want at least one each per flush: the fallback did not run",
			r.Flushes, r.Eval, r.NoScript)
	}
	return r
}

// Info returns srv's INFO section, failing t if the server does not answer
// with one.
func Info(t testing.TB, srv *redistest.Server, section string) string {
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

// InfoCount returns field of the line "name:field=N,..." of an INFO
// section, or 0 if there is no such line or field.
func InfoCount(info, name, field string) int64 {
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

// TimedOutRequest returns the call that [PausedCall] and [BusyCall] make on
// key: a token bucket of burst 5 that does not refill during a test,
// charged 1.
func TimedOutRequest(key string) core.Request {
	return core.Request{Key: key, Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerHour(1).WithBurst(5)}}
}

// RemainingOf returns the tokens left in key's bucket of
// [TimedOutRequest], 5 before any call, with a peek.
func RemainingOf(t testing.TB, store core.Store, key string) int64 {
	t.Helper()
	peek := TimedOutRequest(key)
	peek.Op = core.OpPeek
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

// TimeoutContexts returns a function that returns a new context which
// times out after d, for [PausedCall] and [BusyCall]. Each context is
// cancelled at t's cleanup.
func TimeoutContexts(t testing.TB, d time.Duration) func() context.Context {
	return func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		t.Cleanup(cancel)
		return ctx
	}
}

// A Warm loads the script of [TimedOutRequest] and opens store's
// connections before a call on key that must time out, failing t unless
// key's bucket is full. A client that dials a connection on first use
// needs it, or the call would time out in the handshake and never be sent.
type Warm func(t testing.TB, store core.Store, key string)

// CallResult is what [PausedCall] or [BusyCall] saw.
type CallResult struct {
	Remaining int64         // the key's tokens afterwards, of 5
	D         core.Decision // the call's answer
	Err       error
	Took      time.Duration // from sending the call (for PausedCall, from the pause) to its return
}

// PausedCall pauses srv's clients for 400 ms (CLIENT PAUSE ALL) and makes
// a call on key with the context ctx returns, which must time out within
// the pause ([CheckTimedOut]). It waits until 600 ms after the pause began
// and returns the key's remaining tokens and the call's answer. Before the
// pause it calls warm; if warm is nil, it peeks once, which fails t unless
// 5 tokens remain. srv is a server of the test's own, as CLIENT PAUSE
// reaches every client.
func PausedCall(t testing.TB, srv *redistest.Server, store core.Store, key string, ctx func() context.Context, warm Warm) CallResult {
	t.Helper()
	const (
		pause  = 400 * time.Millisecond
		settle = 600 * time.Millisecond // from the pause to the check
	)
	// Load the script and open the connections before the pause.
	if warm != nil {
		warm(t, store, key)
	} else if n := RemainingOf(t, store, key); n != 5 {
		t.Fatalf("%d remaining before the pause, want 5", n)
	}
	if _, err := srv.Do("CLIENT", "PAUSE", strconv.Itoa(int(pause/time.Millisecond)), "ALL"); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	var r CallResult
	r.D, r.Err = store.Apply(ctx(), TimedOutRequest(key))
	r.Took = time.Since(paused)
	CheckTimedOut(t, r.D, r.Err, r.Took, pause)
	time.Sleep(time.Until(paused.Add(settle)))
	r.Remaining = RemainingOf(t, store, key)
	return r
}

// CheckTimedOut checks the answer to a call that had to time out before
// the server could answer, after limit: an error, a zero Decision, and a
// return before limit.
func CheckTimedOut(t testing.TB, d core.Decision, err error, took, limit time.Duration) {
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

// BusyLua keeps the server in a loop for ARGV[1] µs and returns the
// instant, in µs since the Unix epoch, it began: run with EVAL from
// another client, it holds every other client's command until it ends. The loop is also bounded
// by a count, in case TIME stood still within a script.
const BusyLua = `
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

// BusyCall keeps srv busy in a 300 ms script from a connection of its own,
// and makes a call on a fresh key from the store meanwhile, with the
// context ctx returns. It waits until the call returned, the script ended
// and the server has had time to run what it received, and returns the
// key's remaining tokens and the call's answer. A call that reached the
// server before the script began proves nothing; BusyCall then tries
// again, up to 3 times. srv is a server of the test's own, as a busy
// server makes every client wait.
//
// Before the call, BusyCall calls warm. If warm is nil, it peeks from 8
// goroutines at once, which opens 8 connections in a client with a pool,
// so that a client that retries finds one ready while the server is busy
// (a new connection's handshake would time out first).
func BusyCall(t testing.TB, srv *redistest.Server, store core.Store, ctx func() context.Context, warm Warm) CallResult {
	t.Helper()
	const (
		busy   = 300 * time.Millisecond
		lead   = 50 * time.Millisecond  // from sending the script to the call
		settle = 100 * time.Millisecond // after the script and the call
	)
	if warm == nil {
		warm = warmPool
	}
	for attempt := 1; ; attempt++ {
		key := fmt.Sprintf("busy%d", attempt)
		// Load the script and open the connections first.
		warm(t, store, key)
		type result struct {
			began time.Time
			err   error
		}
		done := make(chan result, 1)
		go func() {
			r, err := srv.Do("EVAL", BusyLua, "0", strconv.FormatInt(busy.Microseconds(), 10))
			if err != nil {
				done <- result{err: err}
				return
			}
			us, err := r.Int()
			done <- result{time.UnixMicro(us), err}
		}()
		time.Sleep(lead)
		sent := time.Now()
		var r CallResult
		r.D, r.Err = store.Apply(ctx(), TimedOutRequest(key))
		r.Took = time.Since(sent)
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
		t.Logf("Apply returned after %v: %+v, %v", r.Took.Round(time.Millisecond), r.D, r.Err)
		time.Sleep(settle)
		r.Remaining = RemainingOf(t, store, key)
		return r
	}
}

// warmPool is BusyCall's default [Warm]: a peek alone, which loads the
// script a lone call runs (concurrent calls may share another,
// algorithms.EachScript), then 8 peeks at once.
func warmPool(t testing.TB, store core.Store, key string) {
	t.Helper()
	if n := RemainingOf(t, store, key); n != 5 {
		t.Fatalf("%d remaining before the call, want 5", n)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if n := RemainingOf(t, store, key); n != 5 {
				t.Errorf("%d remaining before the call, want 5", n)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// CheckBusyTimedOut makes a [BusyCall] with the context ctx returns, which
// must time out within 250 ms, and checks that the call, received while
// the server was busy, was applied exactly once, after the caller gave up:
// 4 tokens remain; 5 is never applied, 3 or less a replay. It logs the
// error the caller got.
func CheckBusyTimedOut(t testing.TB, srv *redistest.Server, store core.Store, ctx func() context.Context, warm Warm) {
	t.Helper()
	r := BusyCall(t, srv, store, ctx, warm)
	CheckTimedOut(t, r.D, r.Err, r.Took, 250*time.Millisecond)
	t.Logf("the caller got %q (%s); then %d remaining", r.Err, DescribeTimeout(r.Err), r.Remaining)
	if r.Remaining != 4 {
		t.Errorf("after the timed-out call, Remaining = %d, want 4: applied once (5: never applied, 3 or less: replayed)", r.Remaining)
	}
}

// DescribeTimeout says how err reports a timeout: by wrapping
// [context.DeadlineExceeded], as a [net.Error] whose Timeout is true, or
// neither.
func DescribeTimeout(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "wraps context.DeadlineExceeded"
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Sprintf("a timeout, %T with Timeout() true, not wrapping context.DeadlineExceeded", ne)
	}
	return "neither context.DeadlineExceeded nor a timeout"
}

// Scripted is a Lua algorithm for tests: the token bucket's name checks
// and transition with another name and script. Make one with
// [NewScripted].
type Scripted struct {
	core.Algorithm
	name   string
	script *algorithms.Script
}

var _ algorithms.Scripted = Scripted{}

// NewScripted returns the algorithm name whose Lua twin is src.
func NewScripted(name, src string) Scripted {
	return Scripted{Algorithm: algorithms.TokenBucket, name: name, script: algorithms.NewScript(src)}
}

// Name returns the name given to [NewScripted].
func (a Scripted) Name() string { return a.name }

// Script returns the script of the source given to [NewScripted].
func (a Scripted) Script() *algorithms.Script { return a.script }

// Unscripted is an algorithm without a Lua twin: embedding the interface
// keeps only [core.Algorithm]'s methods, so Unscripted{algorithms.TokenBucket}
// is the token bucket that a Redis store cannot run.
type Unscripted struct{ core.Algorithm }

// ApplyNoPanic calls store.Apply with req, failing t if it panics.
func ApplyNoPanic(t testing.TB, store core.Store, req core.Request) (d core.Decision, err error) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("Apply panicked: %v", p)
		}
	}()
	return store.Apply(context.Background(), req)
}

// MalformedCase is a script whose reply breaks the calling convention,
// with what a store must return for it: an error wrapping
// [redisstore.ErrMalformed] where the reply is not ten packed integers a
// decision can hold, else an error that says what the server said.
type MalformedCase struct {
	Name, Src string
	Malformed bool   // the error wraps redisstore.ErrMalformed
	Says      string // and the error's text contains this
}

// packed is a script that returns the ten numbers nums, packed as the
// calling convention asks.
func packed(nums string) string { return "return struct.pack('<dddddddddd', " + nums + ")" }

// malformed are the cases of [MalformedCases], with what every store's
// error says.
var malformed = []MalformedCase{
	{"two-numbers", "return struct.pack('<dd', 1, 2)", true, ""},
	{"string", "return 'text'", true, ""},
	{"six-numbers", "return struct.pack('<dddddd', 1, 10, 9, 0, 0, 0)", true, ""},
	{"eleven-numbers", "return struct.pack('<ddddddddddd', 1, 10, 9, 0, 0, 0, 0, 9, 1, 0, 0)", true, ""},
	{"integers", "return {1, 10, 9, 0, 0, 0, 0, 9, 1, 0}", true, ""},
	{"nil", "return nil", true, ""},
	{"fraction", packed("1, 10, 9.5, 0, 0, 0, 0, 9, 1, 0"), true, "number 2 is 9.5"},
	{"nan", packed("1, 10, 9, 0/0, 0, 0, 0, 9, 1, 0"), true, "number 3 is NaN"},
	{"flags-4", packed("4, 1, 1, 0, 0, 0, 0, 1, 1, 0"), true, "flags are 4"},
	{"allowed-with-retry", packed("1, 10, 9, 5, 0, 0, 0, 9, 1, 0"), true, "allowed with retry-after"},
	{"negative-retry", packed("0, 10, 9, -7, 0, 0, 0, 9, 1, 0"), true, "retry-after -7"},
	{"huge-retry", packed("0, 10, 9, 1e300, 0, 0, 0, 9, 1, 0"), true, "number 3 is 1e+300"},
	{"denied-with-delay", packed("0, 10, 9, 5, 5, 5, 0, 9, 1, 0"), true, "delay 5"},
	{"negative-instant", packed("1, 10, 9, 0, 0, 0, -1, 9, 1, 0"), true, "instant -1"},
	{"level-without-unit", packed("1, 10, 9, 0, 0, 0, 0, 9, 0, 0"), true, "level 9/0"},
	{"admitted-by-denial", packed("0, 10, 9, 5, 0, 0, 0, 9, 1, 3"), true, "admitted 3"},
	{"error-reply", "return redis.error_reply('boom')", false, "boom"},
	{"runtime-error", "error('oops')", false, "oops"},
}

// MalformedCases returns the malformed replies every Redis store must
// reject: too few or too many packed numbers (two, the six of the
// convention before the reply carried the instant, level and partial
// admission, eleven), a short string, the array of integers of the
// convention before replies were packed, nil, a number that is not an
// integer or is NaN, flags beyond 3 (allowed and healed), an allowed
// decision with a retry-after, a negative or huge retry-after, a denial
// with a delay, an instant before 1970, a level without its unit, a
// denial that admitted some, an error reply and a runtime error. says
// replaces, by case name, the text a store's error must contain, for a
// store whose errors say more; it panics on a name that is not a case. The
// slice is the caller's.
func MalformedCases(says map[string]string) []MalformedCase {
	cases := slices.Clone(malformed)
	for name, s := range says {
		i := slices.IndexFunc(cases, func(c MalformedCase) bool { return c.Name == name })
		if i < 0 {
			panic(fmt.Sprintf("redisfaults: no malformed case %q", name))
		}
		cases[i].Says = s
	}
	return cases
}

// CheckMalformed calls store with c's script as the algorithm alg (see
// [NewScripted]), logs the error it returns, and checks the answer: an
// error as c says and a zero Decision, never a panic.
func CheckMalformed(t testing.TB, store core.Store, alg string, c MalformedCase) {
	t.Helper()
	d, err := ApplyNoPanic(t, store, core.Request{Key: "k", Cost: 1, Terms: &core.Terms{Algorithm: NewScripted(alg, c.Src), Limit: core.PerSecond(10)}})
	t.Logf("%s: %v", c.Src, err)
	if err == nil {
		t.Fatalf("Apply with %q = %+v, nil; want an error", c.Src, d)
	}
	if d != (core.Decision{}) {
		t.Errorf("Apply with %q = %+v with its error; want a zero Decision", c.Src, d)
	}
	if errors.Is(err, redisstore.ErrMalformed) != c.Malformed {
		t.Errorf("Apply with %q: errors.Is(%v, ErrMalformed) = %v, want %v", c.Src, err, !c.Malformed, c.Malformed)
	}
	if !strings.Contains(err.Error(), c.Says) {
		t.Errorf("Apply with %q: error %q does not say %q", c.Src, err, c.Says)
	}
}

// CheckUnsupported checks that store fails a call with an algorithm
// without a Lua twin ([Unscripted]) with a zero Decision and an error
// wrapping [core.ErrUnsupported], before any call to Redis: calls, which
// counts what the store's client does (what, such as "commands" or "dials
// and commands"), must stay 0. It logs the error. It then makes a call with the token bucket,
// which calls must count, or it proves nothing.
func CheckUnsupported(t testing.TB, store core.Store, calls func() int64, what string) {
	t.Helper()
	alg := Unscripted{algorithms.TokenBucket}
	if _, ok := core.Algorithm(alg).(algorithms.Scripted); ok {
		t.Fatal("Unscripted is algorithms.Scripted")
	}
	d, err := ApplyNoPanic(t, store, core.Request{Key: "k", Cost: 1, Terms: &core.Terms{Algorithm: alg, Limit: core.PerSecond(10)}})
	if !errors.Is(err, core.ErrUnsupported) || d != (core.Decision{}) {
		t.Errorf("Apply(%s without a script) = %+v, %v; want a zero Decision and an error wrapping core.ErrUnsupported", alg.Name(), d, err)
	}
	if n := calls(); n != 0 {
		t.Errorf("Apply without a script made %d %s, want none", n, what)
	}
	t.Logf("error: %v", err)
	// The counter sees the store's calls: a scripted algorithm is counted.
	if _, err := store.Apply(context.Background(), core.Request{Key: "k", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(10)}}); err != nil {
		t.Fatal(err)
	}
	if calls() == 0 {
		t.Fatalf("the counter counted no %s for a scripted algorithm", what)
	}
}

// Tally is what hammering a key saw (see [Hammer]).
type Tally struct {
	Admitted  int64     // decisions with Allowed
	Late      int64     // of those, the ones whose reply came after the deadline
	Decisions int64     // calls that returned a decision
	LastAdmit time.Time // the latest reply to an admitted call; zero if none
	// Records are every admission and every denialSample-th denial of
	// each goroutine, for Replay.
	Records []Record
}

// denialSample is how many denials Hammer's goroutines see for each one
// they record: denials change no state, so a sample checks them as well,
// and a hot key under memstore sees a million and a half in three seconds.
const denialSample = 8

// A Record is a decision as Hammer keeps it for Replay: the instant it was
// made at (Decision.At, in µs since the epoch) and what it said.
type Record struct {
	At        int64
	Allowed   bool
	Remaining int64
	Retry     time.Duration
}

// Replay checks that records, decisions of cost 1 on one key under alg and
// limit from a fresh state, are what alg's Go transition decides when they
// are taken one at a time in the order the store must have taken them: by
// instant, admissions at one instant before denials (a denial leaves no
// token for an admission at the same instant) and in the order of what
// they left. Each admission charges the model's state; each denial is
// checked on it and changes nothing. It returns an error describing the
// first decision that differs, and the number checked.
func Replay(alg core.Algorithm, limit core.Limit, records []Record) (int, error) {
	recs := slices.Clone(records)
	slices.SortFunc(recs, func(a, b Record) int {
		switch {
		case a.At != b.At:
			return cmp.Compare(a.At, b.At)
		case a.Allowed != b.Allowed:
			if a.Allowed {
				return -1
			}
			return 1
		}
		return cmp.Compare(b.Remaining, a.Remaining)
	})
	var st core.State
	for i, r := range recs {
		step := core.Step{Now: r.At, Cost: 1, Limit: limit}
		model := st
		d := alg.Transition(&model, step)
		if d.Allowed != r.Allowed || d.Remaining != r.Remaining || d.RetryAfter != r.Retry {
			return i, fmt.Errorf("decision %d of %d, at %d µs: the store said allowed %v, remaining %d, retry %v; the model %v, %d, %v",
				i+1, len(recs), r.At, r.Allowed, r.Remaining, r.Retry, d.Allowed, d.Remaining, d.RetryAfter)
		}
		if d.Allowed {
			st = model
		}
	}
	return len(recs), nil
}

// Add adds b's counts to a, keeping the later LastAdmit.
func (a *Tally) Add(b Tally) {
	a.Admitted += b.Admitted
	a.Late += b.Late
	a.Decisions += b.Decisions
	a.Records = append(a.Records, b.Records...)
	if b.LastAdmit.After(a.LastAdmit) {
		a.LastAdmit = b.LastAdmit
	}
}

// Hammer calls store.Apply(req) from n goroutines. Each waits until start,
// then calls in a loop and sends no call after end. It returns what they
// saw, and an error if any call failed (a goroutine stops at its first
// error). The over-grant tests of the Redis and layered stores count with
// it, in one process or several.
func Hammer(store core.Store, req core.Request, n int, start, end time.Time) (Tally, error) {
	return hammer(store, req, n, start, end, false)
}

// HammerUntilDenied is [Hammer], except that the goroutines go on calling
// after end until one of them has seen a denial (for at most 30 s more):
// however few calls a starved process makes by end, the key is driven
// past its limit, so that an over-grant test checks what it should
// without a bound on the calls made.
func HammerUntilDenied(store core.Store, req core.Request, n int, start, end time.Time) (Tally, error) {
	return hammer(store, req, n, start, end, true)
}

func hammer(store core.Store, req core.Request, n int, start, end time.Time, untilDenied bool) (Tally, error) {
	// Only a safety net against a hung server: no call should come near it.
	ctx, cancel := context.WithDeadline(context.Background(), end.Add(30*time.Second))
	defer cancel()
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		total  Tally
		errs   []error
		denied atomic.Bool
	)
	more := func() bool { return time.Now().Before(end) || untilDenied && !denied.Load() }
	for range n {
		wg.Go(func() {
			time.Sleep(time.Until(start))
			var mine Tally
			var err error
			for more() {
				var d core.Decision
				d, err = store.Apply(ctx, req)
				at := time.Now()
				if err != nil {
					break
				}
				mine.Decisions++
				if d.Allowed || mine.Decisions%denialSample == 0 {
					mine.Records = append(mine.Records, Record{At: d.At.UnixMicro(), Allowed: d.Allowed, Remaining: d.Remaining, Retry: d.RetryAfter})
				}
				if !d.Allowed {
					denied.Store(true)
				}
				if d.Allowed {
					mine.Admitted++
					if at.After(end) {
						mine.Late++
					}
					mine.LastAdmit = at
				}
			}
			mu.Lock()
			defer mu.Unlock()
			total.Add(mine)
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return total, fmt.Errorf("%d of %d goroutines failed; the first: %w", len(errs), n, errs[0])
	}
	return total, nil
}

// Keyed names the Redis keys of a store's states: both Redis stores do.
type Keyed interface {
	// Key returns the Redis key of key's state under alg.
	Key(key string, alg core.Algorithm) string
}
