package storetest_test

import (
	"context"
	"fmt"
	"log"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/stores/memstore"
	"github.com/sluicehq/sluice/stores/storetest"
)

// Run the suite from a test of your own store's package; this is how
// memstore runs it.
func ExampleRun() {
	var t *testing.T // your test's *testing.T
	storetest.Run(t, func(t *testing.T) sluice.Store {
		s, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// A store that decides some batches in turn, by calling stores.ApplyInTurn
// from its ApplyAll, says so: this is how the Redis stores run the suite
// on a Cluster, where a batch of keys in different slots cannot be one
// script call.
func ExampleInTurn() {
	var t *testing.T                                  // your test's *testing.T
	var newClusterStore func(*testing.T) sluice.Store // your store on a Redis Cluster
	storetest.Run(t, newClusterStore, storetest.InTurn())
}

// A Counter under a chain of decorators shows what reaches the backend: a
// stack of two rules is decided in one ApplyAll per decision, never in
// single calls. Here the chain is empty.
func ExampleCounter() {
	backend, err := memstore.New(memstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	counter := storetest.NewCounter(backend)
	defer counter.Close()
	stack, err := sluice.NewStack(counter,
		sluice.Rule{Name: "user", Algorithm: algorithms.TokenBucket, Limit: sluice.PerSecond(10)},
		sluice.Rule{Name: "global", Algorithm: algorithms.FixedWindow, Limit: sluice.PerMinute(1000)},
	)
	if err != nil {
		log.Fatal(err)
	}
	for range 3 {
		if _, err := stack.Allow(context.Background(), "user:42", "all"); err != nil {
			log.Fatal(err)
		}
	}
	apply, applyAll, reset := counter.Counts()
	fmt.Printf("Apply %d, ApplyAll %d, Reset %d\n", apply, applyAll, reset)
	// Output:
	// Apply 0, ApplyAll 3, Reset 0
}
