package layered_test

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores"
	"github.com/sluicehq/sluice/stores/layered"
	"github.com/sluicehq/sluice/stores/memstore"
)

// A deny cache in front of a store (here a memstore standing in for
// Redis): once the remote has denied a key, the key is denied locally
// until its wait is over, without a call.
func Example() {
	remote, err := memstore.New(memstore.Config{})
	if err != nil {
		panic(err)
	}
	store, err := layered.New(remote, layered.Config{Size: 10_000})
	if err != nil {
		panic(err)
	}
	defer store.Close() // closes the remote too
	limiter, _ := sluice.NewLimiter(store, algorithms.TokenBucket, core.PerMinute(2))

	ctx := context.Background()
	for range 4 {
		d, _ := limiter.Allow(ctx, "client-42")
		fmt.Println(d.Allowed, d.Source)
	}
	// Output:
	// true store
	// true store
	// false store
	// false cache
}

// Allotments: an allotment of tokens is taken from the remote in one call and spent
// locally.
func Example_allotment() {
	remote, err := memstore.New(memstore.Config{})
	if err != nil {
		panic(err)
	}
	defer remote.Close() // a stores.Func has no Close to pass it on
	calls := 0
	counted := stores.Func(func(ctx context.Context, req core.Request) (core.Decision, error) {
		calls++
		return remote.Apply(ctx, req)
	})
	store, err := layered.New(counted, layered.Config{
		Allot: func(core.Request) int64 { return 10 }, // allotments of 10
	})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	limiter, _ := sluice.NewLimiter(store, algorithms.GCRA, core.PerSecond(100))

	ctx := context.Background()
	for range 10 {
		limiter.Allow(ctx, "hot")
	}
	d, _ := limiter.Allow(ctx, "hot")
	fmt.Println(d.Allowed, d.Source, calls)
	// Output:
	// true allotment 2
}
