package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
)

// skew is how far apart the two callers' clocks are in testSkewedClocks.
const skew = 10 * time.Second

// testSkewedClocks replays the failure of a limiter that stores the
// instant of each charge as the caller gives it (go-zero's token limiter,
// RELIABILITY.md R-18 (c)): two callers whose clocks are 10 s apart take
// turns on one key, each asking once a millisecond of its own clock for
// half a second. A store that took the slow caller's instant as the
// state's would give the fast caller 10 s of refill on every turn, a
// burst each time; deciding at the later of the state's instant and the
// caller's, no turn may bring back anything. So the key admits no more
// than its burst twice (a window's phase may split the run in two) plus
// what the limit refills over the run, on the fast clock.
func testSkewedClocks(t *testing.T, s core.Store, alg core.Algorithm) {
	ctx := context.Background()
	const rate = 10 // a second, and the burst
	req := core.Request{Key: newKey(t), Cost: 1, Terms: &core.Terms{Algorithm: alg, Limit: core.PerSecond(rate)}}
	const turns = 500
	step := time.Millisecond
	fast := time.Now().Truncate(time.Microsecond)
	slow := fast.Add(-skew)
	admitted := [2]int64{} // by the fast caller, by the slow one
	for i := range turns {
		for c, start := range []time.Time{fast, slow} {
			r := req.Clone()
			r.Now = start.Add(time.Duration(i) * step)
			d, err := s.Apply(ctx, r)
			if err != nil {
				t.Fatalf("turn %d: Apply at %v: %v", i+1, r.Now, err)
			}
			if d.Allowed {
				admitted[c]++
			}
		}
	}
	span := time.Duration(turns-1) * step
	bound := 2*rate + int64(rate*span.Seconds())
	got := admitted[0] + admitted[1]
	t.Logf("admitted %d (fast %d, slow %d) of at most %d", got, admitted[0], admitted[1], bound)
	if got > bound {
		t.Errorf("two callers %v apart, taking turns for %v: admitted %d (fast %d, slow %d), want at most %d (twice the burst of %d and the refill over %v)",
			skew, span, got, admitted[0], admitted[1], bound, rate, span)
	}
}
