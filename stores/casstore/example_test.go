package casstore_test

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores/casstore"
)

// A store on a backend in memory (memBackend, in this package's tests: a
// map under a mutex), as a database adapter provides one: the store
// decides, the backend only compares and swaps.
func Example() {
	store, err := casstore.New(newMem(), casstore.Config{})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	limiter, _ := sluice.NewLimiter(store, algorithms.GCRA, core.PerMinute(2))
	for range 3 {
		d, _ := limiter.Allow(context.Background(), "user:42")
		fmt.Println(d.Allowed, d.Remaining)
	}
	fmt.Printf("%+v\n", store.Stats())
	// Output:
	// true 1
	// true 0
	// false 0
	// {Decided:3 Calls:3}
}
