package stores_test

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores"
	"github.com/sluicehq/sluice/stores/memstore"
)

// Func makes a decorator out of a function: this one counts denials
// before passing decisions on.
func ExampleFunc() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	var denials atomic.Int64 // a store must be safe for concurrent use
	counting := stores.Func(func(ctx context.Context, req core.Request) (core.Decision, error) {
		d, err := store.Apply(ctx, req)
		if err == nil && !d.Allowed {
			denials.Add(1)
		}
		return d, err
	})
	limiter, _ := sluice.NewLimiter(counting, algorithms.GCRA, core.PerHour(2))
	for range 5 {
		limiter.Allow(context.Background(), "k")
	}
	fmt.Println("denials:", denials.Load())
	// Output: denials: 3
}

// A store that cannot decide a batch in one atomic step says so in code:
// its ApplyAll validates the batch and decides it in turn. Here a stack
// of two rules over such a store is denied by its second rule, and the
// first rule's charge is refunded.
func ExampleApplyInTurn() {
	mem, _ := memstore.New(memstore.Config{})
	defer mem.Close()
	var store core.Store = inTurn{mem}
	stack, _ := sluice.NewStack(store,
		sluice.Rule{Name: "user", Algorithm: algorithms.TokenBucket, Limit: core.PerMinute(10)},
		sluice.Rule{Name: "daily", Algorithm: algorithms.TokenBucket, Limit: core.PerDay(1)},
	)
	ctx := context.Background()
	for range 3 {
		v, _ := stack.Allow(ctx, "u", "u")
		fmt.Println("allowed:", v.Allowed)
	}
	p, _ := stack.Peek(ctx, "u", "u")
	fmt.Println("user left after one more:", p.Rules()[0].Remaining)
	// Output:
	// allowed: true
	// allowed: false
	// allowed: false
	// user left after one more: 8
}

// inTurn is a store that decides batches in turn.
type inTurn struct{ *memstore.Store }

func (s inTurn) ApplyAll(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	if err := stores.ValidateAll(reqs, out); err != nil {
		return err
	}
	return stores.ApplyInTurn(ctx, s.Store, reqs, out)
}

func ExampleEscaper() {
	keys := stores.NewEscaper("|=")
	var key []byte
	key = keys.Append(key, "user")
	key = append(key, '=')
	key = keys.Append(key, "a=b|100%")
	fmt.Println(string(key), keys.Len("a=b|100%"))
	// Output: user=a%3Db%7C100%25 14
}
