package algorithms_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
)

// TestWorkedExample is the README's example: 10 req/s with a burst of 50.
// A flood at t0 gets the whole burst; a flood each second after gets the
// second's 10.
func TestWorkedExample(t *testing.T) {
	t.Parallel()
	lim := core.PerSecond(10).WithBurst(50)
	floods := []struct {
		at       time.Duration
		arrive   int
		admitted int
	}{
		{0, 60, 50},
		{1 * time.Second, 60, 10},
		{2 * time.Second, 60, 10},
		{3 * time.Second, 60, 10},
		{4 * time.Second, 60, 10},
	}
	for _, alg := range []core.Algorithm{algorithms.TokenBucket, algorithms.GCRA} {
		t.Run(alg.Name(), func(t *testing.T) {
			t.Parallel()
			var s core.State
			for i, fl := range floods {
				if got := admitN(alg, lim, &s, fl.at, fl.arrive, 1); got != fl.admitted {
					t.Errorf("step %d: %d × AllowN(%s, 1) admitted %d, want %d", i, fl.arrive, offset(fl.at), got, fl.admitted)
				}
			}
		})
	}
}

// TestWorkedExampleSteps follows the worked example call by call around
// the end of the burst.
func TestWorkedExampleSteps(t *testing.T) {
	t.Parallel()
	lim := core.PerSecond(10).WithBurst(50)
	for _, alg := range []core.Algorithm{algorithms.TokenBucket, algorithms.GCRA} {
		t.Run(alg.Name(), func(t *testing.T) {
			t.Parallel()
			var s core.State
			runSteps(t, alg, lim, &s, []step{
				{at: 0, cost: 1, allowed: true, remaining: 49, reset: 100 * time.Millisecond},
				{at: 0, cost: 48, allowed: true, remaining: 1, reset: 4900 * time.Millisecond},
				{at: 0, cost: 1, allowed: true, remaining: 0, reset: 5 * time.Second},
				{at: 0, cost: 1, remaining: 0, retry: 100 * time.Millisecond, reset: 5 * time.Second},
				{at: 100*time.Millisecond - time.Microsecond, cost: 1, remaining: 0, retry: time.Microsecond, reset: 4900*time.Millisecond + time.Microsecond},
				{at: 100 * time.Millisecond, cost: 1, allowed: true, remaining: 0, reset: 5 * time.Second},
				{at: 1100 * time.Millisecond, cost: 11, remaining: 10, retry: 100 * time.Millisecond, reset: 4 * time.Second},
				{at: 1100 * time.Millisecond, cost: 10, allowed: true, remaining: 0, reset: 5 * time.Second},
				{at: 6100 * time.Millisecond, cost: 50, allowed: true, remaining: 0, reset: 5 * time.Second},
			})
		})
	}
}

// TestFixedWindowBoundary shows the fixed window's documented weakness: a
// full window's rate at its last microsecond and another at the first
// microsecond of the next is 2×Rate within a moment. The sliding window
// log, and here the counter too, admit only Rate in that moment.
func TestFixedWindowBoundary(t *testing.T) {
	t.Parallel()
	lim := core.PerSecond(10)
	last := time.Second - time.Microsecond // the last microsecond of [t0, t0+1s)
	for _, tc := range []struct {
		alg             core.Algorithm
		atLast, atFirst int // admitted of 10 at t0+1s−1µs and of 10 at t0+1s
	}{
		{algorithms.FixedWindow, 10, 10},
		{algorithms.SlidingWindowLog, 10, 0},
		{algorithms.SlidingWindowCounter, 10, 0},
	} {
		t.Run(tc.alg.Name(), func(t *testing.T) {
			t.Parallel()
			var s core.State
			if got := admitN(tc.alg, lim, &s, last, 10, 1); got != tc.atLast {
				t.Errorf("step 0: 10 × AllowN(%s, 1) admitted %d, want %d", offset(last), got, tc.atLast)
			}
			if got := admitN(tc.alg, lim, &s, time.Second, 10, 1); got != tc.atFirst {
				t.Errorf("step 1: 10 × AllowN(%s, 1) admitted %d, want %d", offset(time.Second), got, tc.atFirst)
			}
		})
	}

	t.Run("steps", func(t *testing.T) {
		t.Parallel()
		var fw, log core.State
		runSteps(t, algorithms.FixedWindow, lim, &fw, []step{
			{at: last, cost: 10, allowed: true, remaining: 0, reset: time.Microsecond},
			{at: last, cost: 1, remaining: 0, retry: time.Microsecond, reset: time.Microsecond},
			{at: time.Second, cost: 10, allowed: true, remaining: 0, reset: time.Second},
		})
		runSteps(t, algorithms.SlidingWindowLog, lim, &log, []step{
			{at: last, cost: 10, allowed: true, remaining: 0, reset: time.Second},
			{at: time.Second, cost: 1, remaining: 0, retry: last, reset: last},
			{at: 2*time.Second - 2*time.Microsecond, cost: 1, remaining: 0, retry: time.Microsecond, reset: time.Microsecond},
			{at: 2*time.Second - time.Microsecond, cost: 10, allowed: true, remaining: 0, reset: time.Second},
		})
	})
}

// TestSlidingWindowCounterWeighting: 10 admitted in one minute; a quarter
// into the next, the previous count weighs 75%, 7.5 requests, rounded up to
// 8, so exactly 2 more pass, and the next passes at the exact instant the
// previous count's weight has fallen to 7.
func TestSlidingWindowCounterWeighting(t *testing.T) {
	t.Parallel()
	lim := core.PerMinute(10)
	var s core.State
	if got := admitN(algorithms.SlidingWindowCounter, lim, &s, 10*time.Second, 12, 1); got != 10 {
		t.Fatalf("12 × AllowN(t0+10s, 1) admitted %d, want 10", got)
	}
	runSteps(t, algorithms.SlidingWindowCounter, lim, &s, []step{
		// At the start of the next window the previous count weighs fully.
		{at: 60 * time.Second, cost: 1, remaining: 0, retry: 6 * time.Second, reset: 60 * time.Second},
		{at: 75 * time.Second, cost: 3, remaining: 2, retry: 3 * time.Second, reset: 45 * time.Second},
		{at: 75 * time.Second, cost: 1, allowed: true, remaining: 1, reset: 105 * time.Second},
		{at: 75 * time.Second, cost: 1, allowed: true, remaining: 0, reset: 105 * time.Second},
		{at: 75 * time.Second, cost: 1, remaining: 0, retry: 3 * time.Second, reset: 105 * time.Second},
		{at: 78*time.Second - time.Microsecond, cost: 1, remaining: 0, retry: time.Microsecond, reset: 102*time.Second + time.Microsecond},
		{at: 78 * time.Second, cost: 1, allowed: true, remaining: 0, reset: 102 * time.Second},
		// In the window after, the 3 of the window before weigh 3×(1−e).
		{at: 120 * time.Second, cost: 8, remaining: 7, retry: 20 * time.Second, reset: 60 * time.Second},
		{at: 140 * time.Second, cost: 8, allowed: true, remaining: 0, reset: 100 * time.Second},
		// Two windows later nothing is left.
		{at: 240 * time.Second, cost: 10, allowed: true, remaining: 0, reset: 120 * time.Second},
	})
}

// TestWeightedCosts charges costs of 3 and 7 against a capacity of 10.
func TestWeightedCosts(t *testing.T) {
	t.Parallel()
	lim := core.PerSecond(10) // 100ms a token, burst 10
	ms := time.Millisecond
	bucket := []step{
		{at: 0, cost: 3, allowed: true, remaining: 7, reset: 300 * ms},
		{at: 0, cost: 7, allowed: true, remaining: 0, reset: time.Second},
		{at: 0, cost: 3, remaining: 0, retry: 300 * ms, reset: time.Second},
		{at: 200 * ms, cost: 3, remaining: 2, retry: 100 * ms, reset: 800 * ms},
		{at: 300 * ms, cost: 3, allowed: true, remaining: 0, reset: time.Second},
		{at: 1300 * ms, cost: 10, allowed: true, remaining: 0, reset: time.Second},
		{at: 1300 * ms, cost: 0, allowed: true, remaining: 0, reset: time.Second},
		{at: 1800 * ms, cost: 7, remaining: 5, retry: 200 * ms, reset: 500 * ms},
		{at: 2000 * ms, cost: 7, allowed: true, remaining: 0, reset: time.Second},
	}
	tables := []struct {
		alg   core.Algorithm
		steps []step
	}{
		{algorithms.TokenBucket, bucket},
		{algorithms.GCRA, bucket},
		{algorithms.FixedWindow, []step{
			{at: 100 * ms, cost: 3, allowed: true, remaining: 7, reset: 900 * ms},
			{at: 100 * ms, cost: 7, allowed: true, remaining: 0, reset: 900 * ms},
			{at: 500 * ms, cost: 3, remaining: 0, retry: 500 * ms, reset: 500 * ms},
			{at: 1000 * ms, cost: 7, allowed: true, remaining: 3, reset: time.Second},
			{at: 1500 * ms, cost: 7, remaining: 3, retry: 500 * ms, reset: 500 * ms},
			{at: 1500 * ms, cost: 3, allowed: true, remaining: 0, reset: 500 * ms},
			{at: 2000*ms - time.Microsecond, cost: 0, allowed: true, remaining: 0, reset: time.Microsecond},
			{at: 2000 * ms, cost: 10, allowed: true, remaining: 0, reset: time.Second},
		}},
		{algorithms.SlidingWindowCounter, []step{
			{at: 0, cost: 3, allowed: true, remaining: 7, reset: 2 * time.Second},
			{at: 0, cost: 7, allowed: true, remaining: 0, reset: 2 * time.Second},
			// Next window: 10×(1−e) + 3 ≤ 10 from e = 0.3.
			{at: 500 * ms, cost: 3, remaining: 0, retry: 800 * ms, reset: 1500 * ms},
			{at: 1300 * ms, cost: 3, allowed: true, remaining: 0, reset: 1700 * ms},
			// 10×0.5 + 3 + 3 > 10; 10×(1−e) + 6 ≤ 10 from e = 0.6.
			{at: 1500 * ms, cost: 3, remaining: 2, retry: 100 * ms, reset: 1500 * ms},
			{at: 1600 * ms, cost: 3, allowed: true, remaining: 0, reset: 1400 * ms},
			// The 6 of [1s, 2s) weigh fully at 2s; 6×(1−e) + 7 ≤ 10 from e = 0.5.
			{at: 2000 * ms, cost: 7, remaining: 4, retry: 500 * ms, reset: time.Second},
			{at: 2500 * ms, cost: 7, allowed: true, remaining: 0, reset: 1500 * ms},
		}},
		{algorithms.SlidingWindowLog, []step{
			{at: 0, cost: 3, allowed: true, remaining: 7, reset: time.Second},
			{at: 400 * ms, cost: 7, allowed: true, remaining: 0, reset: time.Second},
			{at: 600 * ms, cost: 3, remaining: 0, retry: 400 * ms, reset: 800 * ms},
			{at: 1000 * ms, cost: 3, allowed: true, remaining: 0, reset: time.Second},
			{at: 1200 * ms, cost: 7, remaining: 0, retry: 200 * ms, reset: 800 * ms},
			{at: 1400 * ms, cost: 7, allowed: true, remaining: 0, reset: time.Second},
			{at: 1400 * ms, cost: 0, allowed: true, remaining: 0, reset: time.Second},
		}},
	}
	for _, tc := range tables {
		t.Run(tc.alg.Name(), func(t *testing.T) {
			t.Parallel()
			var s core.State
			runSteps(t, tc.alg, lim, &s, tc.steps)
		})
	}
}

// TestBackwardsClock: after an admission at t, a request stamped earlier is
// decided as at t, by every algorithm: the same decision, the same state.
func TestBackwardsClock(t *testing.T) {
	t.Parallel()
	lim := core.PerSecond(10)
	at := t0 + 5_000_000
	for _, alg := range algorithms.All() {
		t.Run(alg.Name(), func(t *testing.T) {
			t.Parallel()
			var s core.State
			apply(alg, &s, at, core.Request{Cost: 7, Terms: &core.Terms{Algorithm: alg, Limit: lim}})
			for _, back := range []time.Duration{time.Microsecond, time.Second, time.Hour} {
				for _, cost := range []int64{0, 1, 3, 4, 11} {
					for _, peek := range []bool{false, true} {
						past, present := clone(s), clone(s)
						req := core.Request{Cost: cost, Op: peekIf(peek), Terms: &core.Terms{Algorithm: alg, Limit: lim}}
						got := apply(alg, &past, at-back.Microseconds(), req)
						want := apply(alg, &present, at, req)
						if got != want {
							t.Errorf("Transition(t0+5s−%v, cost %d, peek %t) = %+v, want as at t0+5s: %+v", back, cost, peek, got, want)
						}
						if !sameState(past, present) {
							t.Errorf("Transition(t0+5s−%v, cost %d, peek %t) left state %s, want as at t0+5s: %s", back, cost, peek, relState(past), relState(present))
						}
					}
				}
			}
		})
	}
}

// TestBackwardsClockSteps spells out what deciding at max(Last, now) means for
// each algorithm: no refill from the past, and no earlier window.
func TestBackwardsClockSteps(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	tables := []struct {
		alg   core.Algorithm
		lim   core.Limit
		steps []step
	}{
		// Decided at t0+4s, the bucket would have had 4s less to refill
		// and the request would wait until t0+6s.
		{algorithms.TokenBucket, core.PerSecond(1), []step{
			{at: 5 * time.Second, cost: 1, allowed: true, remaining: 0, reset: time.Second},
			{at: 4 * time.Second, cost: 1, remaining: 0, retry: time.Second, reset: time.Second},
			{at: 4 * time.Second, cost: 0, allowed: true, remaining: 0, reset: time.Second},
			{at: 6 * time.Second, cost: 1, allowed: true, remaining: 0, reset: time.Second},
		}},
		{algorithms.GCRA, core.PerSecond(1), []step{
			{at: 5 * time.Second, cost: 1, allowed: true, remaining: 0, reset: time.Second},
			{at: 4 * time.Second, cost: 1, remaining: 0, retry: time.Second, reset: time.Second},
			{at: 6 * time.Second, cost: 1, allowed: true, remaining: 0, reset: time.Second},
		}},
		// Decided at t0+999ms the request would fall in the window
		// [t0, t0+1s), which holds nothing.
		{algorithms.FixedWindow, core.PerSecond(10), []step{
			{at: 1000 * ms, cost: 10, allowed: true, remaining: 0, reset: time.Second},
			{at: 999 * ms, cost: 1, remaining: 0, retry: time.Second, reset: time.Second},
			{at: 1500 * ms, cost: 1, remaining: 0, retry: 500 * ms, reset: 500 * ms},
			{at: 2000 * ms, cost: 1, allowed: true, remaining: 9, reset: time.Second},
		}},
		{algorithms.SlidingWindowCounter, core.PerSecond(10), []step{
			{at: 1000 * ms, cost: 10, allowed: true, remaining: 0, reset: 2 * time.Second},
			{at: 999 * ms, cost: 1, remaining: 0, retry: 1100 * ms, reset: 2 * time.Second},
			{at: 2100 * ms, cost: 1, allowed: true, remaining: 0, reset: 1900 * ms},
		}},
		{algorithms.SlidingWindowLog, core.PerSecond(10), []step{
			{at: 5000 * ms, cost: 9, allowed: true, remaining: 1, reset: time.Second},
			{at: 4000 * ms, cost: 1, allowed: true, remaining: 0, reset: time.Second},
			{at: 4000 * ms, cost: 1, remaining: 0, retry: time.Second, reset: time.Second},
			{at: 6000 * ms, cost: 10, allowed: true, remaining: 0, reset: time.Second},
		}},
	}
	for _, tc := range tables {
		t.Run(tc.alg.Name(), func(t *testing.T) {
			t.Parallel()
			var s core.State
			runSteps(t, tc.alg, tc.lim, &s, tc.steps)
		})
	}

	// The log keeps one entry per instant, in time order: a charge stamped
	// before the last one is logged at the last one's instant.
	t.Run("log order", func(t *testing.T) {
		t.Parallel()
		var s core.State
		lim := core.PerSecond(10)
		for _, at := range []int64{5_000_000, 4_000_000, 4_999_999} {
			apply(algorithms.SlidingWindowLog, &s, t0+at, core.Request{Cost: 2, Terms: &core.Terms{Algorithm: algorithms.SlidingWindowLog, Limit: lim}})
		}
		want := []core.LogEntry{{At: t0 + 5_000_000, Cost: 6}}
		if len(s.Log[s.Vals[algorithms.LogFirst]:]) != 1 || s.Log[s.Vals[algorithms.LogFirst]] != want[0] || s.Last != t0+5_000_000 {
			t.Errorf("after charges at t0+5s, t0+4s, t0+5s−1µs: Last = %s, live log = %v, want Last = t0+5s, log %v", offset(time.Duration(s.Last-t0)*time.Microsecond), s.Log[s.Vals[algorithms.LogFirst]:], want)
		}
	})
}
