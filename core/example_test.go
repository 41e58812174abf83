package core_test

import (
	"context"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores/memstore"
)

// The README's quick start: a token bucket of 10 requests a second in
// bursts of 50, per key, on the in-memory store.
func Example() {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	limiter, err := core.NewLimiter(store, algorithms.TokenBucket, core.PerSecond(10).WithBurst(50))
	if err != nil {
		log.Fatal(err)
	}
	for i := 1; ; i++ {
		d, err := limiter.Allow(context.Background(), "user:42")
		if err != nil {
			log.Fatal(err) // the store failed; a denial is not an error
		}
		if !d.Allowed {
			fmt.Printf("request %d denied: retry in %v\n", i, d.RetryAfter.Round(10*time.Millisecond))
			break
		}
	}
	// Output: request 51 denied: retry in 100ms
}

func ExampleLimit_String() {
	fmt.Println(core.PerSecond(10).WithBurst(50))
	fmt.Println(core.PerDay(1000))
	fmt.Println(core.Every(250 * time.Millisecond))
	fmt.Println(core.PerSecond(0).Validate())
	// Output:
	// 10 req/s (burst 50)
	// 1000 req/day (burst 1000)
	// 1 req/250ms (burst 1)
	// sluice: invalid limit: rate 0 must be at least 1
}

// A Request carries its own instant, so decisions can be replayed or
// tested at fixed times; Peek asks without charging.
func ExampleRequest() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	req := core.Request{Key: "k", Algorithm: algorithms.FixedWindow, Limit: core.PerMinute(3), Cost: 2, Now: t0}

	d, _ := store.Apply(context.Background(), req)
	fmt.Println(d.Allowed, d.Remaining, d.ResetAfter)

	req.Now, req.Peek = t0.Add(30*time.Second), true
	d, _ = store.Apply(context.Background(), req)
	fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)

	req.Cost = 4
	d, _ = store.Apply(context.Background(), req)
	fmt.Println(d.Unsatisfiable())
	// Output:
	// true 1 1m0s
	// false 1 30s
	// true
}

// StoreFunc makes a decorator out of a function: this one counts denials
// before passing decisions on.
func ExampleStoreFunc() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	var denials atomic.Int64 // a store must be safe for concurrent use
	counting := core.StoreFunc(func(ctx context.Context, req core.Request) (core.Decision, error) {
		d, err := store.Apply(ctx, req)
		if err == nil && !d.Allowed {
			denials.Add(1)
		}
		return d, err
	})
	limiter, _ := core.NewLimiter(counting, algorithms.GCRA, core.PerHour(2))
	for range 5 {
		limiter.Allow(context.Background(), "k")
	}
	fmt.Println("denials:", denials.Load())
	// Output: denials: 3
}
