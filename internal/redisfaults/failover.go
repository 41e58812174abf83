package redisfaults

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/telemetry"
)

// FailoverModes are the modes [CheckSentinelFailover] runs a breaker in,
// by their names in package policy.
var FailoverModes = []string{"fail-open", "fail-closed", "degrade"}

// SentinelStore returns a store on a new client of a Sentinel set: the
// sentinels at addrs, which monitor the primary under masterName. The
// test's cleanup closes the client.
type SentinelStore func(t testing.TB, masterName string, addrs []string) core.Store

// Breaker is a store behind a circuit breaker, such as package policy's,
// whose state the scenario reads as package telemetry does.
type Breaker interface {
	core.Store
	telemetry.Breaker
}

// Guard returns a breaker in front of remote that answers by mode, one of
// [FailoverModes], under a per-call deadline of timeout: policy.NewBreaker
// with policy.WithMode and policy.WithTimeout. The test's cleanup closes
// it. Each store's test supplies it: this package cannot import package
// policy, whose own tests import this one.
type Guard func(t testing.TB, remote core.Store, mode string, timeout time.Duration) Breaker

// The scenario's load and limits. Eight goroutines per mode, each pausing
// 4 ms between calls, ask for far more than the limit's 100 a second, so
// the key stays at its limit while the store decides.
const (
	failoverGoroutines = 8
	failoverPause      = 4 * time.Millisecond
	failoverWarm       = time.Second      // load before the kill
	failoverSettle     = 5 * time.Second  // for circuits tripped by a stall before the kill to close
	failoverWait       = 15 * time.Second // for the sentinels' failover
	failoverRecover    = 8 * time.Second  // for every mode's circuit to close, after the failover
	failoverPost       = time.Second      // load after the last mode closed its circuit
	// failoverDeadline is the breakers' per-call deadline: well above a
	// round trip on a 2-core machine shared with other tests under the
	// race detector, so that only the failover, not the machine, fails
	// calls.
	failoverDeadline = 50 * time.Millisecond
)

// failoverLimit is the load's limit on its key: a token bucket of 100 a
// second, burst 100.
var failoverLimit = core.PerSecond(100)

// FailoverResult is what [CheckSentinelFailover] measured for one mode.
type FailoverResult struct {
	// Client names the Redis client; Mode is the breaker's, one of
	// FailoverModes.
	Client, Mode string
	// Failover is the time from the kill until every sentinel reported
	// the promoted replica as the primary.
	Failover time.Duration
	// Reached is the time from the kill until a store on a client of its
	// own, without a breaker, first decided again: the client's own
	// recovery, the same for every mode. The store is asked (a peek)
	// every 10 ms.
	Reached time.Duration
	// Recovered is the time from the kill until the first decision from
	// the store (core.SourceStore) among the calls begun after it: the
	// store decides again, on the new primary.
	Recovered time.Duration
	// Closed is the time from the kill until the circuit was first seen
	// closed after Recovered (polled every 20 ms).
	Closed time.Duration
	// Span is the load's duration, from its first call to the end of its
	// last.
	Span time.Duration
	// Decisions and Errors count the calls that returned a decision and
	// an error; Errors must be 0.
	Decisions, Errors int64
	// Admitted counts the allowed decisions, from any source; FromStore
	// those from the store, and ByMode those of the mode (fail-open's or
	// degrade's), and Answered the decisions the mode made, allowed or
	// not.
	Admitted, FromStore, ByMode, Answered int64
	// StoreBound is the most the store may admit over Span: burst + rate
	// × Span, and one burst more for the failover, which may lose the
	// key's latest writes (see CheckSentinelFailover).
	StoreBound int64
	// Bound is the most the run may admit from any source: StoreBound
	// for fail-closed; for degrade, StoreBound and a local burst for each
	// spell of local decisions and rate × Span; 0 for fail-open, which
	// admits without bound while the store cannot decide.
	Bound int64
	// Changes is how many times the circuit changed state.
	Changes uint64
}

// String returns the result as a row of the table that docs/redis.md
// shows, under [FailoverHeader]: client, mode, the times of the
// failover, of the client's and the breaker's recovery and of the
// circuit's close, the errors, what was admitted against its bound, and
// the circuit's changes.
func (r FailoverResult) String() string {
	bound := fmt.Sprintf("%d ≤ %d", r.Admitted, r.Bound)
	if r.Bound == 0 {
		bound = fmt.Sprintf("%d (unbounded while the store cannot decide)", r.Admitted)
	}
	return fmt.Sprintf("| %s | %s | %.2f s | %.2f s | %.2f s | %.2f s | %d of %d | %s; from Redis %d ≤ %d | %d |",
		r.Client, r.Mode, r.Failover.Seconds(), r.Reached.Seconds(), r.Recovered.Seconds(), r.Closed.Seconds(),
		r.Errors, r.Decisions+r.Errors, bound, r.FromStore, r.StoreBound, r.Changes)
}

// FailoverHeader is the header of the table whose rows
// [FailoverResult.String] returns.
const FailoverHeader = "| client | mode | failover (sentinels) | client alone decides again | decisions from Redis again | circuit closed | errors to callers | admitted ≤ bound | circuit changes |\n|---|---|---|---|---|---|---|---|---|"

// modeRun is one mode's breaker, key and tallies.
type modeRun struct {
	mode string
	b    Breaker
	req  core.Request

	decisions, errs, admitted, fromStore, byMode, answered atomic.Int64
	recovered                                              atomic.Int64 // since t0, ns; 0 until then
	firstErr                                               atomic.Pointer[error]
}

// CheckSentinelFailover kills the primary of a Sentinel set of its own
// under load, once, and measures how each mode of a breaker rides the
// failover: a store per mode (newStore, each on a client of its own)
// behind a breaker in that mode (guard, per-call deadline 50 ms), and
// 8 goroutines per mode deciding on one key under a token bucket of 100 a
// second, burst 100. The load runs for a second, the primary is killed
// (SIGKILL), the sentinels promote the replica, and the load goes on
// until every mode decides from the store again and its circuit has
// closed, and a second more. It logs a row per mode (see
// [FailoverResult.String]) and returns the results.
//
// It fails t if a caller got an error; if the sentinels do not promote the
// replica within 15 seconds, or a mode's decisions do not come from the
// store again, with its circuit closed, within 8 seconds more; if a mode
// never answered a call itself (the outage went unseen); if no decision
// reached the promoted replica; or if more was admitted than the bound.
//
// The bound. Redis replicates asynchronously: the replica may lack the
// key's last writes when the primary dies, and the promoted replica
// decides from an older state, in which the admissions since are not
// counted. A token bucket's older state holds at most a burst more than
// the lost one (its level never passes the burst), so a failover admits
// at most one burst more per key than the limit: over the load's span S,
// the store admits at most burst + rate × S + burst. Fail-closed admits
// only the store's; degrade adds its local decisions, at most a burst per
// spell of them (its local state starts full and is discarded whenever
// the circuit closes) and rate × S; fail-open admits everything while the
// store cannot decide, and only its store's admissions are bounded.
func CheckSentinelFailover(t *testing.T, client string, newStore SentinelStore, guard Guard) []FailoverResult {
	t.Helper()
	set := redistest.StartSentinel(t)
	runs := make([]*modeRun, len(FailoverModes))
	for i, mode := range FailoverModes {
		store := newStore(t, set.MasterName(), set.SentinelAddrs())
		runs[i] = &modeRun{
			mode: mode,
			b:    guard(t, store, mode, failoverDeadline),
			req:  core.Request{Key: "failover-" + mode, Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: failoverLimit}},
		}
	}

	// A store without a breaker, peeked at from the kill on, tells when
	// the client itself decides again.
	bare := newStore(t, set.MasterName(), set.SentinelAddrs())
	t.Cleanup(func() { bare.Close() })
	peek := core.Request{Key: "failover-bare", Cost: 1, Op: core.OpPeek, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: failoverLimit}}
	if _, err := bare.Apply(context.Background(), peek); err != nil {
		t.Fatalf("a peek before the kill: %v", err)
	}

	t0 := time.Now()
	var killedAt atomic.Int64 // since t0, ns; 0 until the kill
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var lastEnd atomic.Int64 // since t0, ns
	for _, r := range runs {
		for range failoverGoroutines {
			wg.Go(func() { r.load(t0, &killedAt, &lastEnd, stop) })
		}
	}
	stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopLoad()

	// The first calls open the clients' connections; a stall of the
	// machine among them may trip a circuit. Start from closed ones.
	time.Sleep(failoverWarm)
	if err := waitClosed(runs, failoverSettle); err != nil {
		t.Fatalf("before the kill: %v", err)
	}
	for _, r := range runs {
		if n := r.errs.Load(); n != 0 {
			t.Fatalf("%s: %d errors before the kill; the first: %v", r.mode, n, r.firstError())
		}
	}

	if err := set.KillPrimary(); err != nil {
		t.Fatal(err)
	}
	killed := time.Since(t0)
	killedAt.Store(int64(killed))
	var reachedAt atomic.Int64 // since t0, ns; 0 until the bare store decides
	wg.Go(func() { reach(bare, peek, t0, &reachedAt, stop) })
	promoted, err := set.WaitFailover(failoverWait)
	if err != nil {
		t.Fatal(err)
	}
	failover := time.Since(t0) - killed

	// Wait until each mode decides from the store again and its circuit
	// is closed.
	closedAt := make([]time.Duration, len(runs))
	deadline := time.Now().Add(failoverRecover)
	for done := 0; done < len(runs); {
		done = 0
		for i, r := range runs {
			if closedAt[i] == 0 && r.recovered.Load() != 0 && r.b.BreakerState() == telemetry.BreakerClosed {
				closedAt[i] = time.Since(t0) - killed
			}
			if closedAt[i] != 0 {
				done++
			}
		}
		if done < len(runs) && time.Now().After(deadline) {
			for i, r := range runs {
				if closedAt[i] == 0 {
					t.Errorf("%s %s: %v after the failover, decisions from the store: %v; circuit %s",
						client, r.mode, failoverRecover, r.recovered.Load() != 0, r.b.BreakerState())
				}
			}
			t.FailNow()
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(failoverPost)
	stopLoad()
	span := time.Duration(lastEnd.Load())
	reachedAfter := time.Duration(reachedAt.Load()) - killed
	if reachedAt.Load() == 0 {
		t.Errorf("%s: a client without a breaker never decided again", client)
		reachedAfter = 0
	}

	newPrimary := Info(t, promoted, "commandstats")
	scripts := InfoCount(newPrimary, "cmdstat_evalsha", "calls") + InfoCount(newPrimary, "cmdstat_eval", "calls")
	t.Logf("%s: the promoted replica %s ran %d scripts (%d NOSCRIPT answered by EVAL)",
		client, promoted.Addr(), scripts, InfoCount(Info(t, promoted, "errorstats"), "errorstat_NOSCRIPT", "count"))
	if scripts == 0 {
		t.Errorf("%s: no decision reached the promoted replica", client)
	}

	results := make([]FailoverResult, len(runs))
	rows := []string{FailoverHeader}
	for i, r := range runs {
		res := r.result(client, span)
		res.Failover, res.Reached = failover, reachedAfter
		res.Recovered, res.Closed = time.Duration(r.recovered.Load())-killed, closedAt[i]
		results[i] = res
		rows = append(rows, res.String())
		r.check(t, res)
	}
	t.Logf("%s: the primary killed %.2f s into the load, of %.2f s:\n%s", client, killed.Seconds(), span.Seconds(), strings.Join(rows, "\n"))
	return results
}

// load decides r's request through r's breaker every failoverPause until
// stop is closed, tallying what it gets. The first decision from the
// store among the calls begun after the kill marks r recovered.
func (r *modeRun) load(t0 time.Time, killedAt, lastEnd *atomic.Int64, stop <-chan struct{}) {
	ctx := context.Background()
	for {
		select {
		case <-stop:
			return
		default:
		}
		began := int64(time.Since(t0))
		d, err := r.b.Apply(ctx, r.req)
		storeMax(lastEnd, int64(time.Since(t0)))
		switch {
		case err != nil:
			if r.errs.Add(1) == 1 {
				r.firstErr.Store(&err)
			}
		default:
			r.decisions.Add(1)
			fromStore := d.Source == core.SourceStore
			if !fromStore {
				r.answered.Add(1)
			}
			if d.Allowed {
				r.admitted.Add(1)
				if fromStore {
					r.fromStore.Add(1)
				} else {
					r.byMode.Add(1)
				}
			}
			if k := killedAt.Load(); fromStore && k != 0 && began > k {
				r.recovered.CompareAndSwap(0, began)
			}
		}
		time.Sleep(failoverPause)
	}
}

// firstError returns the first error a caller got, or nil.
func (r *modeRun) firstError() error {
	if p := r.firstErr.Load(); p != nil {
		return *p
	}
	return nil
}

// reach peeks through store every 10 ms, each under a deadline of
// 100 ms, until one succeeds or stop is closed, and sets at to when the
// call that succeeded began, since t0.
func reach(store core.Store, peek core.Request, t0 time.Time, at *atomic.Int64, stop <-chan struct{}) {
	for {
		began := time.Since(t0)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_, err := store.Apply(ctx, peek)
		cancel()
		if err == nil {
			at.Store(int64(began))
			return
		}
		select {
		case <-stop:
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// storeMax sets a to v if v is larger.
func storeMax(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}

// waitClosed waits up to limit until every run's circuit is closed.
func waitClosed(runs []*modeRun, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		var open []string
		for _, r := range runs {
			if s := r.b.BreakerState(); s != telemetry.BreakerClosed {
				open = append(open, r.mode+" "+s)
			}
		}
		if len(open) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("circuits not closed after %v: %s", limit, strings.Join(open, ", "))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// result returns r's tallies and bounds over the load's span.
func (r *modeRun) result(client string, span time.Duration) FailoverResult {
	l := r.req.Limit
	overSpan := int64(float64(l.Rate())*span.Seconds()/l.Period().Seconds()) + 1
	res := FailoverResult{
		Client: client, Mode: r.mode, Span: span,
		Decisions: r.decisions.Load(), Errors: r.errs.Load(),
		Admitted: r.admitted.Load(), FromStore: r.fromStore.Load(), ByMode: r.byMode.Load(), Answered: r.answered.Load(),
		StoreBound: l.Burst() + overSpan + l.Burst(),
		Changes:    r.b.BreakerChanges(),
	}
	switch r.mode {
	case "fail-closed":
		res.Bound = res.StoreBound
	case "degrade":
		// Each return to closed takes three changes (open, half-open,
		// closed), and discards the local state: a spell of local
		// decisions before each, and one after the last.
		spells := 1 + int64(res.Changes)/3
		res.Bound = res.StoreBound + spells*l.Burst() + overSpan
	}
	return res
}

// check fails t unless res, r's result, is within what the scenario
// allows.
func (r *modeRun) check(t *testing.T, res FailoverResult) {
	t.Helper()
	if res.Errors != 0 {
		t.Errorf("%s %s: %d of %d calls returned an error, want none; the first: %v",
			res.Client, res.Mode, res.Errors, res.Decisions+res.Errors, r.firstError())
	}
	if res.Answered == 0 {
		t.Errorf("%s %s: the mode answered no call: the failover went unseen", res.Client, res.Mode)
	}
	if res.FromStore > res.StoreBound {
		t.Errorf("%s %s: the store admitted %d over %v, more than its bound %d", res.Client, res.Mode, res.FromStore, res.Span, res.StoreBound)
	}
	if res.Bound != 0 && res.Admitted > res.Bound {
		t.Errorf("%s %s: %d admitted over %v, more than the bound %d", res.Client, res.Mode, res.Admitted, res.Span, res.Bound)
	}
	switch {
	case res.Mode == "fail-closed" && res.ByMode != 0:
		t.Errorf("%s fail-closed: %d admitted by the mode, want none", res.Client, res.ByMode)
	case res.Mode == "fail-open" && res.ByMode != res.Answered:
		t.Errorf("%s fail-open: the mode admitted %d of the %d calls it answered, want all", res.Client, res.ByMode, res.Answered)
	}
}
