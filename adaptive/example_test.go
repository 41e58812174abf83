package adaptive_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/stores/memstore"
)

// A limiter whose limit follows the downstream's latency: healthy
// intervals raise it, a slow one lowers it.
func Example() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	law := adaptive.AIMD(adaptive.LatencyAbove(0.99, 50*time.Millisecond), adaptive.Increase(10))
	ctrl, err := adaptive.New(sluice.PerSecond(100), law, adaptive.WithBounds(10, 1000),
		adaptive.WithOnChange(func(c adaptive.Change) { fmt.Printf("%v -> %v (%v)\n", c.Old, c.New, c.Reason) }))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ctrl.Close()
	p, _ := policy.New(store, policy.WithOverride(ctrl.Override))
	lim, _ := sluice.NewLimiter(p, algorithms.TokenBucket, sluice.PerSecond(100))

	ctx := context.Background()
	// In production: go ctrl.Run(ctx), which updates once an interval.
	for _, latency := range []time.Duration{20 * time.Millisecond, 20 * time.Millisecond, 80 * time.Millisecond} {
		for range 30 {
			if d, _ := lim.Allow(ctx, "payments-api"); d.Allowed {
				ctrl.Report(latency, adaptive.OK) // after each downstream call
			}
		}
		ctrl.Update(ctx)
	}
	fmt.Println(ctrl.Limit())
	// Output:
	// 100 req/s (burst 100) -> 110 req/s (burst 110) (healthy)
	// 110 req/s (burst 110) -> 120 req/s (burst 120) (healthy)
	// 120 req/s (burst 120) -> 108 req/s (burst 108) (latency)
	// 108 req/s (burst 108)
}
