package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
)

// TestParityExtremes compares every Lua twin with its Go transition at
// the edges of exact arithmetic: periods of 1µs and of 2^50µs, rates and
// capacities of 2^52, costs up to 2^52, and instants at the epoch and just
// below 2^52µs.
func TestParityExtremes(t *testing.T) {
	t.Parallel()
	client := redis.NewClient(&redis.Options{Addr: testAddr(t), MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	store := newStore(t, client, false)
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
	ctx := context.Background()
	for _, alg := range algorithms.All() {
		for li, limit := range limits {
			if alg.Validate(limit) != nil || limit.Validate() != nil {
				continue
			}
			for _, start := range []int64{0, core.MaxUnits - 1 - 2*limit.PeriodMicros(), core.MaxUnits - 1} {
				start = max(start, 0)
				name := fmt.Sprintf("%s/%d/%d", alg.Name(), li, start)
				rng := rand.New(rand.NewPCG(uint64(li), uint64(start)))
				key := fmt.Sprintf("x%d-%d", li, start)
				var state core.State
				now := start
				capacity := limit.Burst()
				if alg != algorithms.TokenBucket && alg != algorithms.GCRA {
					capacity = limit.Rate()
				}
				for i := range 300 {
					period := limit.PeriodMicros()
					switch rng.IntN(6) {
					case 0:
						now -= rng.Int64N(period + 1)
					case 1, 2:
					case 3:
						now += rng.Int64N(2*period + 1)
					default:
						now += rng.Int64N(period/limit.Rate() + 2)
					}
					now = min(max(now, 0), core.MaxUnits-1)
					var cost int64
					switch rng.IntN(6) {
					case 0:
						cost = 0
					case 1:
						cost = min(capacity+1, core.MaxUnits)
					case 2:
						cost = capacity
					case 3:
						cost = rng.Int64N(capacity) + 1
					default:
						cost = rng.Int64N(min(capacity, 3)) + 1
					}
					peek := rng.IntN(8) == 0
					want := alg.Transition(&state, now, cost, limit, peek)
					req := core.Request{Key: key, Algorithm: alg, Limit: limit, Cost: cost, Now: time.UnixMicro(now), Peek: peek}
					got, err := store.Apply(ctx, req)
					if err != nil {
						t.Fatalf("%s: op %d: Apply(now=%d, cost=%d, %v, peek=%v): %v", name, i, now, cost, limit, peek, err)
					}
					if got != want {
						t.Fatalf("%s: op %d: Apply(now=%d, cost=%d, %v, peek=%v)\n got %+v\nwant %+v\nstate %+v", name, i, now, cost, limit, peek, got, want, state)
					}
				}
			}
		}
	}
}
