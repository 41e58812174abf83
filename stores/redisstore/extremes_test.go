package redisstore_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
)

// TestParityExtremes compares every Lua twin with its Go transition at
// the edges of exact arithmetic: periods of 1µs and of 2^50µs, rates and
// capacities of 2^52, costs up to 2^52, and instants at the epoch and just
// below 2^52µs.
func TestParityExtremes(t *testing.T) {
	t.Parallel()
	client := scriptClient(t)
	store := newStore(t, client)
	maxPeriod := core.MaxPeriod
	limits := []core.Limit{
		core.Every(time.Microsecond),
		core.Per(1<<52, time.Microsecond),
		core.Per(1, maxPeriod),
		core.Per(1<<52, maxPeriod),
		core.Per(3, maxPeriod).WithBurst(1),
		core.Per(1<<52-1, time.Second).WithBurst(1),
		core.Per(5, 7*time.Microsecond).WithBurst(1 << 49),
	}
	for _, alg := range algorithms.All() {
		for li, limit := range limits {
			for _, start := range []int64{0, max(core.MaxUnits-1-2*limit.PeriodMicros(), 0), core.MaxUnits - 1} {
				t.Run(fmt.Sprintf("%s/%d/%d", alg.Name(), li, start), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(li), uint64(start)))
					parity(t, store, alg, fmt.Sprintf("x%d-%d", li, start), rng, 300, []core.Limit{limit}, start)
				})
			}
		}
	}
}
