package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/stores/memstore"
)

// A store with a virtual clock, bounded at 1000 keys. The sweeper is off,
// because it would read the clock from its own goroutine; Sweep is called
// by hand instead.
func Example() {
	clock := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	store, err := memstore.New(memstore.Config{
		MaxKeys:       1000,
		SweepInterval: -1,
		Now:           func() time.Time { return clock },
	})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	limiter, _ := sluice.NewLimiter(store, algorithms.TokenBucket, sluice.PerMinute(60))

	ctx := context.Background()
	limiter.AllowN(ctx, "k", 60)
	d, _ := limiter.Allow(ctx, "k")
	fmt.Println(d.Allowed, d.RetryAfter)

	clock = clock.Add(time.Second)
	d, _ = limiter.Allow(ctx, "k")
	fmt.Println(d.Allowed, d.Remaining)

	clock = clock.Add(time.Minute) // full again: the state has expired
	store.Sweep()
	fmt.Println(store.Stats().Keys)
	// Output:
	// false 1s
	// true 0
	// 0
}
