package algorithms_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
)

// The bucket algorithms reserve: both say so, through a stack's names too.
func TestBucketsReserve(t *testing.T) {
	t.Parallel()
	for _, alg := range []core.Algorithm{algorithms.TokenBucket, algorithms.GCRA} {
		if !core.Reserves(alg) || !core.Reserves(core.Named(alg, "r")) {
			t.Errorf("%s does not reserve", alg.Name())
		}
	}
	for _, alg := range []core.Algorithm{algorithms.FixedWindow, algorithms.SlidingWindowCounter, algorithms.SlidingWindowLog} {
		if core.Reserves(alg) {
			t.Errorf("%s reserves; its capacity returns at a boundary", alg.Name())
		}
	}
}

// reserveStep is one call of a reservation table: a reservation within
// wait (a plain charge when zero), or a refund, and every field of its
// decision; the level in tokens, below zero while reservations are owed.
type reserveStep struct {
	at        time.Duration
	cost      int64
	wait      time.Duration
	queue     int64 // MaxQueue
	refund    bool
	lim       core.Limit // the table's when zero
	allowed   bool
	remaining int64
	level     float64
	retry     time.Duration
	reset     time.Duration
	delay     time.Duration
}

func runReserveSteps(t *testing.T, alg core.Algorithm, lim core.Limit, s *core.State, steps []reserveStep) {
	t.Helper()
	for i, st := range steps {
		l := lim
		if st.lim != (core.Limit{}) {
			l = st.lim
		}
		req := core.Request{Cost: st.cost, Terms: &core.Terms{Limit: l}}
		call := "AllowN"
		switch {
		case st.refund:
			req.Op, call = core.OpRefund, "Refund"
		case st.wait > 0:
			req.Op, req.MaxWait, req.MaxQueue, call = core.OpReserve, st.wait, st.queue, fmt.Sprintf("ReserveN(wait %v, queue %d)", st.wait, st.queue)
		}
		d := apply(alg, s, t0+st.at.Microseconds(), req)
		want := core.Decision{Allowed: st.allowed, Limit: l.Burst(), Remaining: st.remaining, RetryAfter: st.retry, ResetAfter: st.reset, Delay: st.delay}
		if u, _ := l.Units(); d.Level.PerToken != u || d.Level.Tokens() != st.level {
			t.Errorf("step %d: %s %s(%s, %d) under %v: Level = %v (%d/%d), want %v", i, alg.Name(), call, offset(st.at), st.cost, l, d.Level, d.Level.Units, d.Level.PerToken, st.level)
		}
		want.Level = d.Level
		if d != want {
			t.Errorf("step %d: %s %s(%s, %d) under %v = %+v, want %+v", i, alg.Name(), call, offset(st.at), st.cost, l, d, want)
		}
	}
}

// TestGCRAReserve: GCRA's debt is its TAT beyond the tolerance. Every
// reservation below decides as the token bucket's would, field for field.
func TestGCRAReserve(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	lim := core.PerSecond(10).WithBurst(2) // a token every 100ms
	steps := []reserveStep{
		{at: 0, cost: 2, allowed: true, remaining: 0, reset: 200 * ms},
		// The TAT runs 100ms beyond the tolerance: one owed.
		{at: 0, cost: 1, wait: 100 * ms, allowed: true, level: -1, reset: 300 * ms, delay: 100 * ms},
		{at: 0, cost: 1, wait: 150 * ms, level: -1, retry: 200 * ms, reset: 300 * ms},
		{at: 0, cost: 2, wait: 300 * ms, allowed: true, level: -3, reset: 500 * ms, delay: 300 * ms},
		// A plain request waits for the whole debt; so does a cost of 0
		// not at all.
		{at: 0, cost: 1, level: -3, retry: 400 * ms, reset: 500 * ms},
		{at: 0, cost: 0, allowed: true, level: -3, reset: 500 * ms},
		// A queue of 3 tokens: 3 are owed already.
		{at: 0, cost: 1, wait: time.Hour, queue: 3, level: -3, retry: 400 * ms, reset: 500 * ms},
		// Refunding the last 2 moves the TAT back 200ms.
		{at: 0, cost: 2, refund: true, allowed: true, level: -1, reset: 300 * ms},
		{at: 0, cost: 1, wait: time.Hour, queue: 2, allowed: true, level: -2, reset: 400 * ms, delay: 200 * ms},
		// Half a token has come back in 50ms.
		{at: 50 * ms, cost: 1, level: -1.5, retry: 250 * ms, reset: 350 * ms},
		{at: 400 * ms, cost: 2, allowed: true, remaining: 0, reset: 200 * ms},
		// A refund never moves the TAT before now.
		{at: 400 * ms, cost: 9, refund: true, allowed: true, remaining: 2, level: 2},
	}
	for _, alg := range []core.Algorithm{algorithms.TokenBucket, algorithms.GCRA} {
		t.Run(alg.Name(), func(t *testing.T) {
			t.Parallel()
			var s core.State
			runReserveSteps(t, alg, lim, &s, steps)
		})
	}
}

// TestGCRADebtLimitChange: a key in debt keeps all the time it owes
// through a change of limit, so reservations already made stay ahead of
// later requests; a key not in debt is capped at the new tolerance, as
// before.
func TestGCRADebtLimitChange(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	ten, five := core.PerSecond(10).WithBurst(3), core.PerSecond(5).WithBurst(1)
	var s core.State
	runReserveSteps(t, algorithms.GCRA, ten, &s, []reserveStep{
		{at: 0, cost: 3, allowed: true, remaining: 0, reset: 300 * ms},
		{at: 0, cost: 2, wait: time.Second, allowed: true, level: -2, reset: 500 * ms, delay: 200 * ms}, // TAT t0+500ms
	})
	if s.Vals[algorithms.GCRAPerMicro] >= 0 {
		t.Fatalf("state %s after a reservation into debt: want its perMicro negative", relState(s))
	}
	runReserveSteps(t, algorithms.GCRA, ten, &s, []reserveStep{
		// At 5 req/s with a burst of 1 the whole 500ms is kept: the key
		// owes 300ms beyond the tolerance of 200ms.
		{at: 0, cost: 1, lim: five, level: -1.5, retry: 500 * ms, reset: 500 * ms},
		{at: 0, cost: 1, wait: time.Second, lim: five, allowed: true, level: -2.5, reset: 700 * ms, delay: 500 * ms}, // TAT t0+700ms
		// Back under 10 req/s, 700ms owed against a tolerance of 300ms.
		{at: 400 * ms, cost: 1, retry: 100 * ms, reset: 300 * ms},
		{at: 500 * ms, cost: 1, allowed: true, remaining: 0, reset: 300 * ms},
	})
	if s.Vals[algorithms.GCRAPerMicro] <= 0 {
		t.Fatalf("state %s out of debt: want its perMicro positive", relState(s))
	}
	// Out of debt, the cap applies again (TestGCRALimitChange).
	var c core.State
	runReserveSteps(t, algorithms.GCRA, core.PerSecond(1).WithBurst(5), &c, []reserveStep{
		{at: 0, cost: 5, allowed: true, remaining: 0, reset: 5 * time.Second},
		{at: 0, cost: 1, lim: core.PerSecond(1), retry: time.Second, reset: time.Second},
	})
}

// TestBucketsAgreeReserving: under a fixed limit GCRA decides exactly as
// the token bucket does, reservations, refunds and queues included, on
// random traces deep into debt and out of it.
func TestBucketsAgreeReserving(t *testing.T) {
	t.Parallel()
	for _, lim := range []core.Limit{
		core.PerSecond(10).WithBurst(5),
		core.PerSecond(50).WithBurst(1),
		core.Per(3, time.Second).WithBurst(7),
		core.Per(13, 999_983*time.Microsecond).WithBurst(1),
		core.PerDay(1_000_000).WithBurst(10),
		core.Per(1_000_003, 7*time.Second).WithBurst(1000),
	} {
		t.Run(lim.String(), func(t *testing.T) {
			t.Parallel()
			u, r := lim.Units()
			interval := max(u/r, 1)
			rng := rand.New(rand.NewPCG(2, uint64(u)^uint64(r)<<32))
			var tb, gc core.State
			now := t0
			var delayed, denied int
			for i := range 20_000 {
				switch k := rng.IntN(100); {
				case k < 50:
				case k < 85:
					now += rng.Int64N(2 * interval)
				case k < 95:
					now += rng.Int64N(20*interval + 1)
				default:
					now -= rng.Int64N(4 * interval)
				}
				req := core.Request{Cost: 1 + rng.Int64N(lim.Burst()), Terms: &core.Terms{Limit: lim}}
				switch k := rng.IntN(100); {
				case k < 50:
					req.Op, req.MaxWait = core.OpReserve, micros(1+rng.Int64N(30*interval))
					if rng.IntN(3) == 0 {
						req.MaxQueue = 1 + rng.Int64N(20)
					}
					if rng.IntN(100) == 0 {
						req.MaxWait = math.MaxInt64 // a debt of up to 2^52 units
					}
				case k < 65:
					req.Op = core.OpRefund
				case k < 75:
					req.Op = core.OpPeek
				case k < 80:
					req.Cost = lim.Burst() + 1
				}
				want := apply(algorithms.TokenBucket, &tb, now, req)
				got := apply(algorithms.GCRA, &gc, now, req)
				if got != want {
					t.Fatalf("step %d: %v of %d at %s within %v, queue %d = %+v, want as the token bucket: %+v", i, req.Op, req.Cost, offset(micros(now-t0)), req.MaxWait, req.MaxQueue, got, want)
				}
				if got.Delay > 0 {
					delayed++
				}
				if !got.Allowed && req.Op == core.OpReserve {
					denied++
				}
			}
			if delayed < 100 || denied < 500 {
				t.Errorf("%d reservations delayed and %d denied of 20000 calls; want many of both", delayed, denied)
			}
		})
	}
}

// TestReserveLimitChange runs random reservations, charges and refunds
// under limits that change between calls, through both bucket
// algorithms, and checks every decision's contracts (checkCall): what a
// state written in debt under another limit becomes never breaks them.
func TestReserveLimitChange(t *testing.T) {
	t.Parallel()
	for _, alg := range []core.Algorithm{algorithms.TokenBucket, algorithms.GCRA} {
		t.Run(alg.Name(), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(9, 4))
			var s core.State
			now := t0
			for i := range 5000 {
				o := op{lim: switchLimits[rng.IntN(len(switchLimits))], peek: rng.IntN(10) == 0}
				if rng.IntN(8) != 0 && i > 0 {
					o.lim = switchLimits[i%3] // mostly a few limits, so debt builds up
				}
				interval := max(o.lim.PeriodMicros()/o.lim.Rate(), 1)
				o.gap = rng.Int64N(2*interval) - interval/4
				o.cost = 1 + rng.Int64N(o.lim.Burst())
				now += o.gap
				req := core.Request{Cost: o.cost, Op: peekIf(o.peek), Terms: &core.Terms{Limit: o.lim}}
				if !o.peek && rng.IntN(2) == 0 {
					req.Op, req.MaxWait = core.OpReserve, micros(1+rng.Int64N(40*interval))
				}
				before := clone(s)
				d := apply(alg, &s, now, req)
				if req.Op == core.OpReserve {
					// checkCall knows charges and peeks: a denied
					// reservation, or one admitted at once, must keep a
					// charge's contracts (its RetryAfter is when the same
					// cost passes at once).
					if !d.Allowed || d.Delay == 0 {
						if _, msg := checkCall(alg, before, s, now, o, d); msg != "" {
							t.Fatalf("op %d: %s under %v, state %s: %s", i, callName(o, now, before, d), o.lim, relState(before), msg)
						}
					}
					continue
				}
				if _, msg := checkCall(alg, before, s, now, o, d); msg != "" {
					t.Fatalf("op %d: %s under %v, state %s: %s", i, callName(o, now, before, d), o.lim, relState(before), msg)
				}
			}
		})
	}
}
