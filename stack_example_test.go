package sluice_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/stores/memstore"
)

// A stack reserves under every rule or under none: the reservation waits
// for the slowest rule, and Cancel gives every rule its capacity back.
func ExampleStack_ReserveN() {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	store, _ := memstore.New(memstore.Config{Now: func() time.Time { return t0 }})
	defer store.Close()
	stack, err := sluice.NewStack(store,
		sluice.Rule{Name: "user", Algorithm: algorithms.TokenBucket, Limit: sluice.PerSecond(10).WithBurst(1)},
		sluice.Rule{Name: "service", Algorithm: algorithms.TokenBucket, Limit: sluice.PerSecond(2).WithBurst(1)},
	)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	keys := []string{"user:42", "all"}
	for range 3 {
		r, err := stack.ReserveN(ctx, keys, 1, 900*time.Millisecond)
		if err != nil {
			log.Fatal(err)
		}
		if !r.OK() {
			fmt.Printf("not within 900ms: %q needs %v\n", stack.Rules()[r.Binding].Name, r.RetryAfter)
			continue
		}
		fmt.Printf("reserved: act in %v (%q binds)\n", r.Delay, stack.Rules()[r.Binding].Name)
		defer r.Cancel(ctx) // in real code: only if the work is called off
	}
	// Output:
	// reserved: act in 0s ("user" binds)
	// reserved: act in 500ms ("service" binds)
	// not within 900ms: "service" needs 1s
}

// A stack with a concurrency rule takes a slot under a lease, which its
// holder releases when the work is done; the rate rule's charge stays.
func ExampleStack_Acquire() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	stack, err := sluice.NewStack(store,
		sluice.Rule{Name: "in-flight", Algorithm: algorithms.Concurrency, Limit: sluice.Per(1, time.Minute)},
		sluice.Rule{Name: "per-minute", Algorithm: algorithms.TokenBucket, Limit: sluice.PerMinute(100)},
	)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	first, _ := stack.Acquire(ctx, "tenant:7", "tenant:7")
	second, _ := stack.Acquire(ctx, "tenant:7", "tenant:7")
	fmt.Println("first:", first.OK(), "second:", second.OK(), "denied by", stack.Rules()[second.Binding].Name)
	if err := first.Release(ctx); err != nil {
		log.Fatal(err)
	}
	third, _ := stack.Acquire(ctx, "tenant:7", "tenant:7")
	fmt.Println("after the release:", third.OK(), "per-minute left:", third.Rules()[1].Remaining)
	third.Release(ctx)
	// Output:
	// first: true second: false denied by in-flight
	// after the release: true per-minute left: 98
}
