package policy

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redisfaults"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/storetest"
)

// The stack outage test: a two-rule sluice.Stack, a per-user token bucket
// and a global GCRA, over a breaker over a real Redis that is killed
// under load and restarted.

// stackRules are the test's rules. Among 4 instances their shares are 25
// a second (burst 25) per user and 100 a second (burst 100) in all: the
// load's 4 users together can spend the global share, so that both rules
// bind.
var stackRules = []sluice.Rule{
	{Name: "user", Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(100)},
	{Name: "global", Algorithm: algorithms.GCRA, Limit: core.PerSecond(400)},
}

// stackSample is one verdict of the stack load.
type stackSample struct {
	at, took time.Duration // when the call began, after t0, and how long it took
	mode     Mode          // of the view the verdict came through
	user     int
	allowed  bool
	sources  []core.Source // each rule's
	err      error
}

func (s stackSample) end() time.Duration { return s.at + s.took }

// stackLoad is 64 goroutines deciding through stacks, goroutine g through
// stacks[g%len(stacks)], on one of loadKeys users in turn.
type stackLoad struct {
	stop    chan struct{}
	wg      sync.WaitGroup
	panics  atomic.Int64
	samples [loadGoroutines][]stackSample
}

// startStackLoad starts the load from t0, pausing between calls; pass a
// zero pause for a burst that opens a client's connections. The stacks'
// keys are prefixed with their modes, so that each mode has keys of its
// own.
func startStackLoad(stacks []*sluice.Stack, modes []Mode, t0 time.Time, pause time.Duration) *stackLoad {
	l := &stackLoad{stop: make(chan struct{})}
	for g := range loadGoroutines {
		l.wg.Go(func() {
			defer func() {
				if p := recover(); p != nil {
					l.panics.Add(1)
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a safety net only
			defer cancel()
			m := g % len(stacks)
			for i := g; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				u := i % loadKeys
				start := time.Now()
				v, err := stacks[m].Allow(ctx, fmt.Sprintf("%v:user%d", modes[m], u), modes[m].String()+":all")
				s := stackSample{at: start.Sub(t0), took: time.Since(start), mode: modes[m], user: u, allowed: v.Allowed, err: err}
				for _, d := range v.Rules() {
					s.sources = append(s.sources, d.Source)
				}
				l.samples[g] = append(l.samples[g], s)
				if pause > 0 {
					time.Sleep(pause)
				}
			}
		})
	}
	return l
}

// Stop stops the goroutines, waits for them and returns every sample.
func (l *stackLoad) Stop() []stackSample {
	close(l.stop)
	l.wg.Wait()
	var all []stackSample
	for _, s := range l.samples {
		all = append(all, s...)
	}
	return all
}

// TestStackKillRestart kills Redis under a load of two-rule stacks, one
// breaker shared by a view in each mode, and restarts it: every verdict
// is a whole stack's answer (its rules share one source: the store's, or
// the mode's while Redis is down), no caller gets an error, degrade
// admits within both rules' local shares, and every decision reaches the
// store as one ApplyAll.
func TestStackKillRestart(t *testing.T) {
	t.Parallel()
	for _, cl := range clients {
		t.Run(cl.name, func(t *testing.T) {
			t.Parallel()
			exclusive(t)
			testStackKillRestart(t, cl)
		})
	}
}

func testStackKillRestart(t *testing.T, cl client) {
	const instances = 4
	srv := redistest.Start(t)
	counter := storetest.NewCounter(cl.store(t, srv.Addr(), nil))
	ch := &changes{}
	b := newBreaker(t, counter, WithInstances(instances), WithOnChange(ch.add))
	modes := []Mode{FailOpen, FailClosed, Degrade}
	var direct, stacks []*sluice.Stack
	for _, m := range modes {
		for _, store := range []core.Store{counter, withMode(t, b, m)} {
			s, err := sluice.NewStack(store, stackRules...)
			if err != nil {
				t.Fatal(err)
			}
			if store == counter {
				direct = append(direct, s)
			} else {
				stacks = append(stacks, s)
			}
		}
	}
	t0 := time.Now()
	since := func(at time.Time) time.Duration { return at.Sub(t0) }
	// A warm client, as a healthy service has (see rig.start): a burst
	// straight to the store opens its connections.
	warm := startStackLoad(direct, modes, t0, 0)
	time.Sleep(200 * time.Millisecond)
	warm.Stop()
	l := startStackLoad(stacks, modes, t0, loadPause)
	time.Sleep(500 * time.Millisecond)
	// A stall of the machine may trip the circuit before the fault: start
	// from a closed one.
	for try := 0; len(ch.list()) != 0 || b.State() != Closed; try++ {
		if try == 3 {
			l.Stop()
			t.Fatalf("the circuit keeps changing state before the fault: %v; %+v", ch.list(), b.Stats())
		}
		waitState(b, Closed, DefaultOpenTimeout+5*time.Second)
		time.Sleep(300 * time.Millisecond)
		ch.reset()
	}

	killed := time.Now()
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	opened, ok := waitState(b, Open, 5*time.Second)
	if !ok {
		l.Stop()
		t.Fatalf("the circuit did not open within 5 s of the kill; changes %v", ch.list())
	}
	time.Sleep(time.Until(killed.Add(1500 * time.Millisecond)))
	restarting := time.Now()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	closed, ok := waitState(b, Closed, DefaultOpenTimeout+5*time.Second)
	time.Sleep(300 * time.Millisecond)
	samples := l.Stop()
	if !ok {
		t.Fatalf("the circuit did not close within %v of the restart; changes %v", DefaultOpenTimeout+5*time.Second, ch.list())
	}
	t.Logf("opened %v after the kill, closed %v after the restart; %d verdicts; %+v",
		opened.Sub(killed).Round(time.Millisecond), closed.Sub(restarted).Round(time.Millisecond), len(samples), b.Stats())

	if n := l.panics.Load(); n != 0 {
		t.Errorf("%d goroutines panicked", n)
	}
	// Whole-stack answers, and the mode's while the circuit was open, up
	// to where the restart begins: a probe may reach the restarted server
	// before Restart returns, and close the circuit.
	var errs, mixed, notMode int
	for _, s := range samples {
		switch {
		case s.err != nil:
			if errs++; errs <= 3 {
				t.Errorf("%v at %v: error %v", s.mode, s.at, s.err)
			}
			continue
		case len(s.sources) != len(stackRules) || s.sources[0] != s.sources[1]:
			if mixed++; mixed <= 3 {
				t.Errorf("%v at %v: rules answered by %v: not one answer for the stack", s.mode, s.at, s.sources)
			}
		}
		if s.at >= since(opened) && s.end() < since(restarting) {
			if s.sources[0] != modeSource[s.mode] || (s.mode == FailOpen && !s.allowed) || (s.mode == FailClosed && s.allowed) {
				if notMode++; notMode <= 3 {
					t.Errorf("%v at %v, while open: allowed %v from %v; want the mode's answer", s.mode, s.at, s.allowed, s.sources)
				}
			}
		}
	}
	if errs+mixed+notMode > 0 {
		t.Errorf("of %d verdicts: %d errors, %d mixing sources, %d not the mode's while open", len(samples), errs, mixed, notMode)
	}
	// Degrade: within each rule's local share while Redis was down, up to
	// the circuit's closing itself, not to when waitState saw it (the
	// local store then answers only the calls over the slow start's cap).
	var closeAt time.Duration
	for _, c := range ch.list() {
		if c.To == Closed {
			closeAt = since(c.At)
		}
	}
	userShare, _ := share(stackRules[0].Limit, instances)
	globalShare, _ := share(stackRules[1].Limit, instances)
	var users [loadKeys][]stackSample
	var global []stackSample
	for _, s := range samples {
		if s.mode == Degrade && s.err == nil && s.sources[0] == core.SourceDegraded && s.at >= since(killed) && s.end() < closeAt {
			users[s.user] = append(users[s.user], s)
			global = append(global, s)
		}
	}
	desc := []string{checkShare(t, "global", globalShare, global)}
	for u, ss := range users {
		desc = append(desc, checkShare(t, fmt.Sprint("user", u), userShare, ss))
	}
	t.Logf("degraded, admitted: %s", strings.Join(desc, "; "))
	if apply, all, _ := counter.Counts(); apply != 0 || all == 0 {
		t.Errorf("%d Apply and %d ApplyAll calls reached the store; want every decision as one ApplyAll", apply, all)
	}
	noscript := redisfaults.InfoCount(redisfaults.Info(t, srv, "errorstats"), "errorstat_NOSCRIPT", "count")
	if noscript == 0 {
		t.Errorf("the restarted server answered no NOSCRIPT: the test did not exercise the fallback")
	}
}

// checkShare checks that samples, a rule's degraded verdicts on one key,
// admitted no more than a token bucket of l over their span, and
// describes what they admitted.
func checkShare(t *testing.T, what string, l core.Limit, samples []stackSample) string {
	t.Helper()
	if len(samples) == 0 {
		t.Errorf("%s: no degraded verdict", what)
		return what + ": none"
	}
	first, last, admitted := samples[0].at, time.Duration(0), 0
	for _, s := range samples {
		first = min(first, s.at)
		if s.allowed {
			admitted++
			last = max(last, s.end())
		}
	}
	bound := bucketBound(l, last-first)
	if admitted > bound {
		t.Errorf("%s: %d admitted over %v, more than its share %v allows (%d)", what, admitted, last-first, l, bound)
	}
	if admitted == 0 {
		t.Errorf("%s: nothing admitted while degraded", what)
	}
	return fmt.Sprintf("%s %d of at most %d", what, admitted, bound)
}
