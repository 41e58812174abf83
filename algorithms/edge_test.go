package algorithms_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
)

// TestUnsatisfiable: a cost above the capacity is denied with RetryNever,
// reports the key's standing, and leaves the state exactly as it was, on a
// fresh key and on a used one, charged or peeked.
func TestUnsatisfiable(t *testing.T) {
	t.Parallel()
	lim := core.PerSecond(10) // burst 10
	for _, tc := range []struct {
		alg core.Algorithm
		// after 4 charged at t0, at t0+100ms
		remaining int64
		reset     time.Duration
	}{
		{algorithms.TokenBucket, 7, 300 * time.Millisecond},
		{algorithms.GCRA, 7, 300 * time.Millisecond},
		{algorithms.FixedWindow, 6, 900 * time.Millisecond},
		{algorithms.SlidingWindowCounter, 6, 1900 * time.Millisecond},
		{algorithms.SlidingWindowLog, 6, 900 * time.Millisecond},
	} {
		t.Run(tc.alg.Name(), func(t *testing.T) {
			t.Parallel()
			var used core.State
			apply(tc.alg, &used, t0, core.Request{Cost: 4, Terms: &core.Terms{Limit: lim}})
			for _, c := range []struct {
				name      string
				s         core.State
				remaining int64
				reset     time.Duration
			}{
				{"fresh", core.State{}, 10, 0},
				{"used", used, tc.remaining, tc.reset},
			} {
				for _, cost := range []int64{11, 12, 1 << 40, math.MaxInt64} {
					for _, peek := range []bool{false, true} {
						s := clone(c.s)
						st := step{at: 100 * time.Millisecond, cost: cost, peek: peek}
						d := apply(tc.alg, &s, t0+st.at.Microseconds(), core.Request{Cost: cost, Op: peekIf(peek), Terms: &core.Terms{Limit: lim}})
						// The level is whole here: the key's standing, exactly.
						want := core.Decision{Limit: 10, Remaining: c.remaining, RetryAfter: core.RetryNever, ResetAfter: c.reset}
						if got := d.Level.Tokens(); got != float64(c.remaining) {
							t.Errorf("%s key: %s: Level = %v, want %d", c.name, st.name(), d.Level, c.remaining)
						}
						want.Level = d.Level
						if d != want {
							t.Errorf("%s key: %s = %+v, want %+v", c.name, st.name(), d, want)
						}
						if !d.Unsatisfiable() {
							t.Errorf("%s key: %s: Unsatisfiable() = false, want true", c.name, st.name())
						}
						if !sameState(s, c.s) {
							t.Errorf("%s key: %s changed the state from %s to %s", c.name, st.name(), relState(c.s), relState(s))
						}
					}
				}
			}
			// A cost of exactly the capacity is satisfiable: it waits.
			s := clone(used)
			if d := apply(tc.alg, &s, t0, core.Request{Cost: 10, Terms: &core.Terms{Limit: lim}}); d.Allowed || d.Unsatisfiable() || d.RetryAfter <= 0 {
				t.Errorf("used key: AllowN(t0, 10) = %+v, want a denial with a finite RetryAfter", d)
			}
		})
	}
}

// TestZeroCost: a cost of zero is always admitted under a fixed limit,
// even when the key is exhausted, reports the same standing as a peek, and
// changes no later decision.
func TestZeroCost(t *testing.T) {
	t.Parallel()
	lim := core.PerSecond(10)
	type call struct {
		at   time.Duration
		cost int64
	}
	trace := []call{
		{0, 10}, {0, 1}, {50 * time.Millisecond, 1}, {100 * time.Millisecond, 1},
		{999 * time.Millisecond, 5}, {time.Second, 5}, {time.Second, 7}, {1500 * time.Millisecond, 3},
		{2 * time.Second, 10}, {2500 * time.Millisecond, 2}, {10 * time.Second, 1},
	}
	for _, alg := range algorithms.All() {
		t.Run(alg.Name(), func(t *testing.T) {
			t.Parallel()
			var plain, probed core.State
			for i, c := range trace {
				now := t0 + c.at.Microseconds()
				before := clone(probed)
				peek := apply(alg, &before, now, core.Request{Cost: 0, Op: core.OpPeek, Terms: &core.Terms{Limit: lim}})
				zero := apply(alg, &probed, now, core.Request{Cost: 0, Terms: &core.Terms{Limit: lim}})
				name := step{at: c.at}.name()
				if !zero.Allowed || zero.RetryAfter != 0 {
					t.Errorf("step %d: %s = %+v, want allowed", i, name, zero)
				}
				if zero != peek {
					t.Errorf("step %d: %s = %+v, want what PeekN said: %+v", i, name, zero, peek)
				}
				got := apply(alg, &probed, now, core.Request{Cost: c.cost, Terms: &core.Terms{Limit: lim}})
				want := apply(alg, &plain, now, core.Request{Cost: c.cost, Terms: &core.Terms{Limit: lim}})
				if got != want {
					t.Errorf("step %d: after %s, AllowN(%s, %d) = %+v, want as without it: %+v", i, name, offset(c.at), c.cost, got, want)
				}
			}
		})
	}
}

// TestZeroCostChangesNothing: a cost of zero charges nothing, and the
// state's Last is documented as the instant of the last charge, so admitting
// one must leave the state as it was. It matters when clocks disagree: a
// zero-cost call stamped late must not drag later decisions forward to its
// instant. Here a key has spent its 1 req/s at t0; a zero-cost call
// stamped t0+10s, then a call stamped t0+500ms, which must wait until
// t0+1s as it would without the zero-cost call.
func TestZeroCostChangesNothing(t *testing.T) {
	t.Parallel()
	lim := core.PerSecond(1)
	for _, alg := range algorithms.All() {
		t.Run(alg.Name(), func(t *testing.T) {
			t.Parallel()
			var used core.State
			apply(alg, &used, t0, core.Request{Cost: 1, Terms: &core.Terms{Limit: lim}})
			for _, c := range []struct {
				name string
				s    core.State
			}{{"fresh", core.State{}}, {"used", used}} {
				s := clone(c.s)
				d := apply(alg, &s, t0+10_000_000, core.Request{Cost: 0, Terms: &core.Terms{Limit: lim}})
				if !d.Allowed {
					t.Errorf("%s key: AllowN(t0+10s, 0) = false, want true", c.name)
				}
				if !sameState(s, c.s) {
					t.Errorf("%s key: AllowN(t0+10s, 0) changed the state from %s to %s, want it unchanged", c.name, relState(c.s), relState(s))
				}
				without := clone(c.s)
				got := apply(alg, &s, t0+500_000, core.Request{Cost: 1, Terms: &core.Terms{Limit: lim}})
				want := apply(alg, &without, t0+500_000, core.Request{Cost: 1, Terms: &core.Terms{Limit: lim}})
				if got != want {
					t.Errorf("%s key: after AllowN(t0+10s, 0), AllowN(t0+500ms, 1) = %+v, want as without it: %+v", c.name, got, want)
				}
			}
		})
	}
}

// TestZeroCostAfterLimitLowered: a cost of zero is always admitted, even
// when a lowered limit leaves the key over it, and changes nothing. Two
// histories under 10 req/s: 10 at t0; and 5 at t0 then 2 at t0+1s, whose
// previous window weighs fully at t0+1s. Then a zero cost, under a lower
// rate, at the last charge's instant.
func TestZeroCostAfterLimitLowered(t *testing.T) {
	t.Parallel()
	ten := core.PerSecond(10)
	histories := []struct {
		charges []step
		lower   core.Limit
	}{
		{[]step{{at: 0, cost: 10}}, core.PerSecond(4)},
		{[]step{{at: 0, cost: 5}, {at: time.Second, cost: 2}}, core.PerSecond(2)},
	}
	for _, alg := range algorithms.All() {
		t.Run(alg.Name(), func(t *testing.T) {
			t.Parallel()
			for i, h := range histories {
				var s core.State
				for _, c := range h.charges {
					if d := apply(alg, &s, t0+c.at.Microseconds(), core.Request{Cost: c.cost, Terms: &core.Terms{Limit: ten}}); !d.Allowed {
						t.Fatalf("history %d: %s = false, want true", i, c.name())
					}
				}
				last := h.charges[len(h.charges)-1].at
				for _, peek := range []bool{false, true} {
					before := clone(s)
					st := step{at: last, peek: peek, lim: h.lower}
					d := apply(alg, &s, t0+last.Microseconds(), core.Request{Op: peekIf(peek), Terms: &core.Terms{Limit: h.lower}})
					if !d.Allowed || d.RetryAfter != 0 {
						t.Errorf("history %d: %s = %+v, want allowed", i, st.name(), d)
					}
					if !sameState(s, before) {
						t.Errorf("history %d: %s changed the state from %s to %s", i, st.name(), relState(before), relState(s))
					}
				}
			}
		})
	}
}

// TestPeek: a peek gets the decision the real call would get, and changes
// nothing, whatever the state.
func TestPeek(t *testing.T) {
	t.Parallel()
	lim := core.PerSecond(10)
	ms := time.Millisecond
	trace := []struct {
		at   time.Duration
		cost int64
	}{
		{0, 3}, {0, 7}, {0, 1}, {0, 0}, {100 * ms, 1}, {250 * ms, 2}, {999 * ms, 5}, {time.Second, 5},
		{time.Second, 11}, {1500 * ms, 0}, {1600 * ms, 4}, {1600 * ms, 4}, {2100 * ms, 10}, {5 * time.Second, 10},
		{5 * time.Second, 1},
	}
	for _, alg := range algorithms.All() {
		t.Run(alg.Name(), func(t *testing.T) {
			t.Parallel()
			var s core.State
			for i, c := range trace {
				now := t0 + c.at.Microseconds()
				before := clone(s)
				peeked := apply(alg, &s, now, core.Request{Cost: c.cost, Op: core.OpPeek, Terms: &core.Terms{Limit: lim}})
				name := step{at: c.at, cost: c.cost, peek: true}.name()
				if !sameState(s, before) {
					t.Fatalf("step %d: %s changed the state from %s to %s", i, name, relState(before), relState(s))
				}
				charged := apply(alg, &s, now, core.Request{Cost: c.cost, Terms: &core.Terms{Limit: lim}})
				if peeked != charged {
					t.Errorf("step %d: %s = %+v, want what AllowN says: %+v", i, name, peeked, charged)
				}
			}
		})
	}
}

// TestDenialLeavesStateUnchanged: a denied request that could pass later
// changes nothing either.
func TestDenialLeavesStateUnchanged(t *testing.T) {
	t.Parallel()
	lim := core.PerSecond(10)
	for _, alg := range algorithms.All() {
		t.Run(alg.Name(), func(t *testing.T) {
			t.Parallel()
			var s core.State
			apply(alg, &s, t0+500_000, core.Request{Cost: 8, Terms: &core.Terms{Limit: lim}})
			for _, cost := range []int64{4, 10} {
				before := clone(s)
				d := apply(alg, &s, t0+600_000, core.Request{Cost: cost, Terms: &core.Terms{Limit: lim}})
				if d.Allowed {
					t.Fatalf("AllowN(t0+600ms, %d) = true, want false", cost)
				}
				if !sameState(s, before) {
					t.Errorf("AllowN(t0+600ms, %d) = false changed the state from %s to %s", cost, relState(before), relState(s))
				}
			}
		})
	}
}

// TestHorizon: a state left alone for its limit's Horizon decides as the
// zero State does, and Horizon is the documented length.
func TestHorizon(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		alg  core.Algorithm
		lim  core.Limit
		want time.Duration
	}{
		{algorithms.TokenBucket, core.PerSecond(10).WithBurst(50), 5 * time.Second},
		{algorithms.GCRA, core.PerSecond(10).WithBurst(50), 5 * time.Second},
		{algorithms.TokenBucket, core.Per(3, time.Second).WithBurst(2), 666667 * time.Microsecond},
		{algorithms.GCRA, core.Per(3, time.Second).WithBurst(2), 666667 * time.Microsecond},
		{algorithms.FixedWindow, core.PerMinute(10), time.Minute},
		{algorithms.SlidingWindowCounter, core.PerMinute(10), 2 * time.Minute},
		{algorithms.SlidingWindowLog, core.PerMinute(10), time.Minute},
	} {
		t.Run(tc.alg.Name()+" "+tc.lim.String(), func(t *testing.T) {
			t.Parallel()
			h := tc.alg.Horizon(tc.lim)
			if h != tc.want {
				t.Errorf("Horizon(%v) = %v, want %v", tc.lim, h, tc.want)
			}
			capa := capacity(tc.alg, tc.lim)
			for _, at := range []int64{t0, t0 + 59_999_999, t0 + 60_000_000} {
				var s core.State
				apply(tc.alg, &s, at, core.Request{Cost: capa, Terms: &core.Terms{Limit: tc.lim}})
				later := s.Last + h.Microseconds()
				for _, cost := range []int64{1, capa} {
					used, fresh := clone(s), core.State{}
					got := apply(tc.alg, &used, later, core.Request{Cost: cost, Terms: &core.Terms{Limit: tc.lim}})
					want := apply(tc.alg, &fresh, later, core.Request{Cost: cost, Terms: &core.Terms{Limit: tc.lim}})
					if got != want {
						t.Errorf("after AllowN(%s, %d), AllowN(+%v, %d) = %+v, want as on a fresh key: %+v", offset(time.Duration(at-t0)*time.Microsecond), capa, h, cost, got, want)
					}
				}
			}
		})
	}
}

func TestByName(t *testing.T) {
	t.Parallel()
	names := []string{"token-bucket", "gcra", "fixed-window", "sliding-window-counter", "sliding-window-log"}
	all := algorithms.All()
	if len(all) != len(names) {
		t.Fatalf("All() has %d algorithms, want %d", len(all), len(names))
	}
	for i, name := range names {
		if all[i].Name() != name {
			t.Errorf("All()[%d].Name() = %q, want %q", i, all[i].Name(), name)
		}
		alg, err := algorithms.ByName(name)
		if err != nil || alg != all[i] {
			t.Errorf("ByName(%q) = %v, %v; want All()[%d], nil", name, alg, err, i)
		}
	}
	if alg, err := algorithms.ByName("leaky-bucket"); err == nil || !strings.Contains(err.Error(), "leaky-bucket") {
		t.Errorf("ByName(%q) = %v, %v; want an error naming it", "leaky-bucket", alg, err)
	}
	all[0] = nil
	if algorithms.All()[0] == nil {
		t.Error("All() returned the package's own slice: changing it changed the next call's")
	}
}
