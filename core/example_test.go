package core_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores/memstore"
)

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
	req := core.Request{Key: "k", Cost: 2, Terms: &core.Terms{Algorithm: algorithms.FixedWindow, Limit: core.PerMinute(3), Now: t0}}

	d, _ := store.Apply(context.Background(), req)
	fmt.Println(d.Allowed, d.Remaining, d.ResetAfter)

	req.Now, req.Op = t0.Add(30*time.Second), core.OpPeek
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

// Chain walks a decorator chain from the outside in, as a decorator does
// to ask what the stores under it can do.
func ExampleChain() {
	mem, err := memstore.New(memstore.Config{})
	if err != nil {
		panic(err)
	}
	counted := &tally{Store: mem}
	defer counted.Close()
	for s := range core.Chain(counted) {
		fmt.Printf("%T\n", s)
	}
	// Output:
	// *core_test.tally
	// *memstore.Store
}

// tally is a decorator of a store: it counts the decisions it passes
// on, and its Unwrap makes the store it decorates visible to [core.Chain].
type tally struct {
	core.Store
	n atomic.Int64
}

func (c *tally) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	c.n.Add(1)
	return c.Store.Apply(ctx, req)
}

func (c *tally) Unwrap() core.Store { return c.Store }
