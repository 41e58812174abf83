package algorithms_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
)

// TestTokenBucketGCRAAgree: under a fixed limit GCRA decides exactly as the
// token bucket does, decision for decision, on long random traces that mix
// floods, pauses, peeks, costs above the burst and a clock that sometimes
// steps back.
func TestTokenBucketGCRAAgree(t *testing.T) {
	t.Parallel()
	for _, lim := range []core.Limit{
		core.PerSecond(10).WithBurst(50),
		core.Per(3, time.Second).WithBurst(7),
		core.PerDay(1_000_000),
		core.PerDay(1_000_000).WithBurst(10),
		core.Every(1500 * time.Microsecond),
		core.PerMinute(7).WithBurst(3),
		core.Per(1_000_003, 7*time.Second).WithBurst(1000),
		core.Per(13, 999_983*time.Microsecond).WithBurst(1),
	} {
		t.Run(lim.String(), func(t *testing.T) {
			t.Parallel()
			u, r := lim.Units()
			interval := max(u/r, 1) // µs per token, rounded down
			rng := rand.New(rand.NewPCG(1, uint64(u)^uint64(r)<<32))
			var tb, gc core.State
			now := t0
			admitted := 0
			for i := range 20_000 {
				switch k := rng.IntN(100); {
				case k < 40: // same instant
				case k < 75:
					now += rng.Int64N(2 * interval)
				case k < 90:
					now += rng.Int64N(lim.Burst()*interval + 1)
				case k < 95:
					now += rng.Int64N(50)
				default:
					now -= rng.Int64N(4 * interval)
				}
				var cost int64
				switch k := rng.IntN(100); {
				case k < 60:
					cost = 1
				case k < 90:
					cost = rng.Int64N(lim.Burst() + 1)
				default:
					cost = lim.Burst() + rng.Int64N(3)
				}
				req := core.Request{Cost: cost, Op: peekIf(rng.IntN(8) == 0), Terms: &core.Terms{Limit: lim}}
				want := apply(algorithms.TokenBucket, &tb, now, req)
				got := apply(algorithms.GCRA, &gc, now, req)
				if got != want {
					t.Fatalf("step %d: %s = %+v, want as the token bucket: %+v", i, step{at: time.Duration(now-t0) * time.Microsecond, cost: cost, peek: req.Op == core.OpPeek}.name(), got, want)
				}
				if got.Allowed && req.Op != core.OpPeek && cost > 0 {
					admitted++
				}
			}
			// A trace that never admits, or never denies, tests little.
			if admitted < 1000 || admitted > 19_000 {
				t.Errorf("the trace admitted %d of 20000 calls; want a mix", admitted)
			}
		})
	}
}

// TestExtremeLimits runs random traces under limits at the edges of what
// core and each algorithm accept, over clocks spanning centuries, and
// checks every decision's contracts: the arithmetic must stay exact where
// the products are largest.
func TestExtremeLimits(t *testing.T) {
	t.Parallel()
	limits := []core.Limit{
		core.PerDay(1).WithBurst(core.MaxUnits / 86_400_000_000), // a bucket of 2^52 units
		core.Per(core.MaxUnits, time.Microsecond).WithBurst(1),   // 2^52 units a µs
		core.Per(core.MaxExact, 2*time.Microsecond).WithBurst(3), // rate 2^53
		core.Per(1, core.MaxUnits*time.Microsecond),              // a period of 2^52 µs
		core.Per(7, core.MaxUnits/7*7*time.Microsecond),
		// 2^52 units of capacity refilled at 8191 a µs: a long idle
		// spell's refill, elapsed × 8191, passes 2^63.
		core.Per(8191, 1<<40*time.Microsecond).WithBurst(1 << 12),
		core.Per(algorithms.MaxLogRate, time.Microsecond),
		core.Per(algorithms.MaxLogRate, core.MaxUnits/algorithms.MaxLogRate*time.Microsecond),
	}
	for _, alg := range algorithms.All() {
		for li, lim := range limits {
			if lim.Validate() != nil || alg.Validate(lim) != nil {
				continue
			}
			t.Run(alg.Name()+" "+lim.String(), func(t *testing.T) {
				t.Parallel()
				rng := rand.New(rand.NewPCG(uint64(li), 17))
				capa := capacity(alg, lim)
				period := lim.PeriodMicros()
				var s core.State
				now := t0
				for i := range 300 {
					o := op{lim: lim, peek: rng.IntN(6) == 0}
					switch k := rng.IntN(10); {
					case k < 3:
					case k < 6:
						o.gap = rng.Int64N(100)
					case k < 8:
						o.gap = rng.Int64N(period/4 + 1)
					case k < 9:
						o.gap = rng.Int64N(core.MaxUnits / 2)
					default:
						o.gap = -rng.Int64N(min(period, core.MaxUnits/4) + 1)
					}
					switch k := rng.IntN(10); {
					case k < 4:
						o.cost = rng.Int64N(min(capa, 4) + 1)
					case k < 8:
						o.cost = rng.Int64N(capa + 1)
					case k < 9:
						o.cost = capa
					default:
						o.cost = capa + 1 + rng.Int64N(1<<62)
					}
					// Instants stay where Request.Validate lets them.
					now = min(max(now+o.gap, 0), core.MaxUnits-1)
					before := clone(s)
					d := apply(alg, &s, now, core.Request{Cost: o.cost, Op: peekIf(o.peek), Terms: &core.Terms{Limit: lim}})
					if _, msg := checkCall(alg, before, s, now, o, d); msg != "" {
						t.Fatalf("op %d: %s, state %s: %s", i, callName(o, now, before, d), relState(before), msg)
					}
				}
			})
		}
	}
}
