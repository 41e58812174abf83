package algorithms_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
)

// The limit travels with every request, so a key's limit may change between
// two calls. These tables check what each algorithm documents it does with
// state written under another limit.

// TestTokenBucketLimitChange: the bucket keeps its whole tokens, capped at
// the new burst; a fraction of a token earned under the old rate is
// dropped. Once full under the limit it was charged under, the key is
// forgotten: it starts full under the new one.
func TestTokenBucketLimitChange(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	t.Run("burst", func(t *testing.T) {
		t.Parallel()
		big, small := core.PerSecond(10).WithBurst(50), core.PerSecond(10).WithBurst(20)
		var s core.State
		runSteps(t, algorithms.TokenBucket, big, &s, []step{
			{at: 0, cost: 10, allowed: true, remaining: 40, reset: time.Second},
			// 40 tokens, capped at the new burst of 20: full again under
			// it at t0+100ms.
			{at: 0, cost: 1, lim: small, allowed: true, remaining: 19, reset: 100 * ms},
			// The cap stays when the burst grows back, 19 of 50, until the
			// key is forgotten at t0+100ms: the waits stop there.
			{at: 0, cost: 0, lim: big, allowed: true, remaining: 19, reset: 100 * ms},
			{at: 0, cost: 20, lim: big, remaining: 19, retry: 100 * ms, reset: 100 * ms},
			{at: 100*ms - time.Microsecond, cost: 20, lim: big, remaining: 19, retry: time.Microsecond, reset: time.Microsecond},
			// Forgotten: a fresh key, full under the burst of 50.
			{at: 100 * ms, cost: 20, lim: big, allowed: true, remaining: 30, reset: 2 * time.Second},
		})
	})
	t.Run("rate", func(t *testing.T) {
		t.Parallel()
		var s core.State
		tenPerSec, fourPerSec := core.PerSecond(10), core.PerSecond(4)
		runSteps(t, algorithms.TokenBucket, tenPerSec, &s, []step{
			{at: 0, cost: 10, allowed: true, remaining: 0, reset: time.Second},
			// 1.5 tokens earned; 0.5 left.
			{at: 150 * ms, cost: 1, allowed: true, remaining: 0, reset: 950 * ms},
			// Under 4 req/s the half token is dropped: a whole token
			// takes 250ms from here, not 125ms.
			// Under 4 req/s the bucket would be full at t0+1.15s, but the
			// key is forgotten at t0+1.1s, when it would have been full
			// under 10 req/s.
			{at: 150 * ms, cost: 1, lim: fourPerSec, remaining: 0, retry: 250 * ms, reset: 950 * ms},
			{at: 400*ms - time.Microsecond, cost: 1, lim: fourPerSec, remaining: 0, retry: time.Microsecond, reset: 700*ms + time.Microsecond},
			{at: 400 * ms, cost: 1, lim: fourPerSec, allowed: true, remaining: 0, reset: time.Second},
			// Back at 10 req/s: no fraction to drop, 0 tokens, 100ms a token.
			{at: 400 * ms, cost: 1, remaining: 0, retry: 100 * ms, reset: time.Second},
			{at: 1400 * ms, cost: 10, allowed: true, remaining: 0, reset: time.Second},
		})
	})
}

// TestGCRALimitChange: the key keeps the time it owes (its TAT), so a
// larger burst lets it through at once where a token bucket, which keeps
// tokens, would not; the time owed is capped at the new tolerance, so a key
// is never more than empty. A TAT with a fraction of a microsecond in ticks
// of another size is rounded up.
func TestGCRALimitChange(t *testing.T) {
	t.Parallel()
	t.Run("tat", func(t *testing.T) {
		t.Parallel()
		var s core.State
		ten, one, oneBurst5 := core.PerSecond(10), core.PerSecond(1), core.PerSecond(1).WithBurst(5)
		runSteps(t, algorithms.GCRA, ten, &s, []step{
			{at: 0, cost: 10, allowed: true, remaining: 0, reset: time.Second}, // TAT t0+1s
			// Owes 1s; at 1 req/s with a burst of 1 a request waits until
			// the TAT, t0+1s.
			{at: 0, cost: 1, lim: one, remaining: 0, retry: time.Second, reset: time.Second},
			// With a burst of 5 the 1s owed leaves room for 4: one now
			// and 3 more.
			{at: 0, cost: 1, lim: oneBurst5, allowed: true, remaining: 3, reset: 2 * time.Second}, // TAT t0+2s
			{at: 0, cost: 4, lim: oneBurst5, remaining: 3, retry: time.Second, reset: 2 * time.Second},
			// Back at 10 req/s the 2s owed is capped at the 1s tolerance:
			// the key is empty, and earns a token in 100ms.
			{at: 0, cost: 1, remaining: 0, retry: 100 * time.Millisecond, reset: time.Second},
			{at: 100*time.Millisecond - time.Microsecond, cost: 1, remaining: 0, retry: time.Microsecond, reset: 900*time.Millisecond + time.Microsecond},
			{at: 100 * time.Millisecond, cost: 1, allowed: true, remaining: 0, reset: time.Second},
			{at: 300 * time.Millisecond, cost: 2, allowed: true, remaining: 0, reset: time.Second},
		})
	})
	t.Run("cap", func(t *testing.T) {
		t.Parallel()
		// 5s owed under a burst of 5 is capped at 1s under a burst of 1:
		// the key, empty, passes a second later, as it was told.
		var s core.State
		runSteps(t, algorithms.GCRA, core.PerSecond(1).WithBurst(5), &s, []step{
			{at: 0, cost: 5, allowed: true, remaining: 0, reset: 5 * time.Second},
			{at: 0, cost: 1, lim: core.PerSecond(1), remaining: 0, retry: time.Second, reset: time.Second},
			{at: time.Second, cost: 1, lim: core.PerSecond(1), allowed: true, remaining: 0, reset: time.Second},
		})
	})
	t.Run("bucket", func(t *testing.T) {
		t.Parallel()
		// The same change, for contrast: the bucket keeps its 0 tokens,
		// until it is forgotten at t0+1s, full under 10 req/s.
		var s core.State
		runSteps(t, algorithms.TokenBucket, core.PerSecond(10), &s, []step{
			{at: 0, cost: 10, allowed: true, remaining: 0, reset: time.Second},
			{at: 0, cost: 1, lim: core.PerSecond(1).WithBurst(5), remaining: 0, retry: time.Second, reset: time.Second},
			{at: time.Second, cost: 5, lim: core.PerSecond(1).WithBurst(5), allowed: true, remaining: 0, reset: 5 * time.Second},
		})
	})
	t.Run("rounding", func(t *testing.T) {
		t.Parallel()
		// 3 req/s: an emission interval of 333333⅓µs. 7 req/s: 142857⅐µs.
		three, seven := core.Per(3, time.Second), core.Per(7, time.Second).WithBurst(4)
		var s core.State
		runSteps(t, algorithms.GCRA, three, &s, []step{
			{at: 0, cost: 1, allowed: true, remaining: 2, reset: 333334 * time.Microsecond},
		})
		if want := (core.State{Last: t0, Vals: [3]int64{t0 + 333333, 1, 3}, Expires: t0 + 333334}); !sameState(s, want) {
			t.Fatalf("after AllowN(t0, 1) under %v: state %s, want %s", three, relState(s), relState(want))
		}
		// TAT t0+333333⅓µs is rounded up to t0+333334µs, then moved on by
		// 142857⅐µs.
		runSteps(t, algorithms.GCRA, seven, &s, []step{
			{at: 0, cost: 1, allowed: true, remaining: 0, reset: 476192 * time.Microsecond},
		})
		if want := (core.State{Last: t0, Vals: [3]int64{t0 + 476191, 1, 7}, Expires: t0 + 476192}); !sameState(s, want) {
			t.Errorf("after AllowN(t0, 1) under %v: state %s, want %s (TAT t0+333334µs + 142857⅐µs)", seven, relState(s), relState(want))
		}
	})
}

// TestFixedWindowLimitChange: the count is kept against the new rate while
// the window is the same; a new period counts afresh from its next window.
func TestFixedWindowLimitChange(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	t.Run("rate", func(t *testing.T) {
		t.Parallel()
		var s core.State
		runSteps(t, algorithms.FixedWindow, core.PerSecond(10), &s, []step{
			{at: 0, cost: 6, allowed: true, remaining: 4, reset: time.Second},
			{at: 500 * ms, cost: 2, lim: core.PerSecond(8), allowed: true, remaining: 0, reset: 500 * ms},
			{at: 500 * ms, cost: 3, remaining: 2, retry: 500 * ms, reset: 500 * ms},
			{at: 500 * ms, cost: 2, allowed: true, remaining: 0, reset: 500 * ms},
			// Lowered below the count: nothing passes until the window ends.
			{at: 600 * ms, cost: 1, lim: core.PerSecond(4), remaining: 0, retry: 400 * ms, reset: 400 * ms},
			{at: time.Second, cost: 4, lim: core.PerSecond(4), allowed: true, remaining: 0, reset: time.Second},
		})
	})
	t.Run("period", func(t *testing.T) {
		t.Parallel()
		var s core.State
		runSteps(t, algorithms.FixedWindow, core.PerSecond(10), &s, []step{
			{at: 31 * time.Second, cost: 10, allowed: true, remaining: 0, reset: time.Second},
			// 10 per 2s: from t0+32s, the first 2s window after the
			// change, the count starts again.
			{at: 32 * time.Second, cost: 10, lim: core.Per(10, 2*time.Second), allowed: true, remaining: 0, reset: 2 * time.Second},
			{at: 33 * time.Second, cost: 1, lim: core.Per(10, 2*time.Second), remaining: 0, retry: time.Second, reset: time.Second},
			// 10 per minute: from t0+60s.
			{at: 60 * time.Second, cost: 10, lim: core.PerMinute(10), allowed: true, remaining: 0, reset: time.Minute},
			{at: 61 * time.Second, cost: 1, lim: core.PerMinute(10), remaining: 0, retry: 59 * time.Second, reset: 59 * time.Second},
		})
	})
}

// TestSlidingWindowCounterLimitChange: both counts are kept against the new
// rate, capped at it; a new period counts afresh.
func TestSlidingWindowCounterLimitChange(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	var s core.State
	ten, twenty, four := core.PerSecond(10), core.PerSecond(20), core.PerSecond(4)
	runSteps(t, algorithms.SlidingWindowCounter, ten, &s, []step{
		{at: 0, cost: 10, allowed: true, remaining: 0, reset: 2 * time.Second},
		// Raised: the 10 counted leave room for 10 more.
		{at: 500 * ms, cost: 10, lim: twenty, allowed: true, remaining: 0, reset: 1500 * ms},
		// 20×(1−e) + 1 ≤ 20 from e = 0.05 in the next window.
		{at: 500 * ms, cost: 1, lim: twenty, remaining: 0, retry: 550 * ms, reset: 1500 * ms},
		// Lowered to 4: the previous 20 count as 4, weighing 2 at e = 0.5.
		// Uncapped they would weigh 10 and deny everything.
		{at: 1500 * ms, cost: 3, lim: four, remaining: 2, retry: 250 * ms, reset: 500 * ms},
		{at: 1500 * ms, cost: 2, lim: four, allowed: true, remaining: 0, reset: 1500 * ms},
		// 4×(1−e) + 2 + 1 ≤ 4 from e = 0.75.
		{at: 1500 * ms, cost: 1, lim: four, remaining: 0, retry: 250 * ms, reset: 1500 * ms},
		// The cap was written with the charge: raised to 20 again, the
		// previous window counts 4, weighing 1 at e = 0.75.
		{at: 1750 * ms, cost: 1, lim: twenty, allowed: true, remaining: 16, reset: 1250 * ms},
		// The current count above a lowered rate is capped too: 3 of 2
		// count as 2, so that in the next window 2×(1−e) + 1 ≤ 2 from
		// e = 0.5 (uncapped, 3×(1−e) + 1 ≤ 2 from e = ⅔).
		{at: 1800 * ms, cost: 1, lim: core.PerSecond(2), remaining: 0, retry: 700 * ms, reset: 1200 * ms},
		{at: 2500*ms - time.Microsecond, cost: 1, lim: core.PerSecond(2), remaining: 0, retry: time.Microsecond, reset: 500*ms + time.Microsecond},
		{at: 2500 * ms, cost: 1, lim: core.PerSecond(2), allowed: true, remaining: 0, reset: 1500 * ms},
		{at: 4 * time.Second, cost: 2, lim: core.PerSecond(2), allowed: true, remaining: 0, reset: 2 * time.Second},
	})

	t.Run("period", func(t *testing.T) {
		t.Parallel()
		var s core.State
		runSteps(t, algorithms.SlidingWindowCounter, ten, &s, []step{
			{at: 1 * time.Second, cost: 10, allowed: true, remaining: 0, reset: 2 * time.Second},
			// 10 per minute: from the first minute window after the
			// change, t0+60s, nothing counts, before or now.
			{at: 60 * time.Second, cost: 10, lim: core.PerMinute(10), allowed: true, remaining: 0, reset: 2 * time.Minute},
			{at: 90 * time.Second, cost: 1, lim: core.PerMinute(10), remaining: 0, retry: 36 * time.Second, reset: 90 * time.Second},
		})
	})
}

// TestSlidingWindowLogLimitChange: the logged charges are judged against
// the new rate and period, until the key is forgotten when its newest
// charge leaves the window it was made under.
func TestSlidingWindowLogLimitChange(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	var s core.State
	ten, twenty, twoSec, tenthSec := core.PerSecond(10), core.PerSecond(20), core.Per(10, 2*time.Second), core.Per(10, 100*time.Millisecond)
	runSteps(t, algorithms.SlidingWindowLog, ten, &s, []step{
		{at: 0, cost: 10, allowed: true, remaining: 0, reset: time.Second},
		{at: 500 * ms, cost: 10, lim: twenty, allowed: true, remaining: 0, reset: time.Second},
		{at: 600 * ms, cost: 1, lim: twenty, remaining: 0, retry: 400 * ms, reset: 900 * ms},
		// Over 2s both charges are in the window, 20 of 10: the request
		// would wait for the charge at t0+500ms to leave, at t0+2.5s, but
		// the key is forgotten at t0+1.5s, when that charge leaves the
		// 1s window it was made under.
		{at: 1400 * ms, cost: 1, lim: twoSec, remaining: 0, retry: 100 * ms, reset: 100 * ms},
		{at: 1500 * ms, cost: 10, lim: twoSec, allowed: true, remaining: 0, reset: 2 * time.Second},
		// Over 100ms the charge at t0+1.5s leaves at t0+1.6s.
		{at: 1550 * ms, cost: 1, lim: tenthSec, remaining: 0, retry: 50 * ms, reset: 50 * ms},
		{at: 1600 * ms, cost: 10, lim: tenthSec, allowed: true, remaining: 0, reset: 100 * ms},
		// Back over 2s the charge at t0+1.6s counts until the key is
		// forgotten at t0+1.7s.
		{at: 1650 * ms, cost: 1, lim: twoSec, remaining: 0, retry: 50 * ms, reset: 50 * ms},
		{at: 1700 * ms, cost: 1, lim: twoSec, allowed: true, remaining: 9, reset: 2 * time.Second},
	})
}
