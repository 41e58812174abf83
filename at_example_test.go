package sluice_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/stores/memstore"
)

// At decides at instants of your own, as x/time/rate's AllowN(t, n) does:
// for tests, replays and simulations. Each decision reports the instant
// it was made at, so a wait becomes an absolute time.
func ExampleLimiter_At() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	limiter, _ := sluice.NewLimiter(store, algorithms.TokenBucket, sluice.PerSecond(10).WithBurst(2))
	ctx := context.Background()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

	for _, at := range []time.Duration{0, 0, 0, 100 * time.Millisecond} {
		d, _ := limiter.At(t0.Add(at)).Allow(ctx, "user:42")
		if d.Allowed {
			fmt.Printf("t0+%v: allowed\n", at)
		} else {
			fmt.Printf("t0+%v: denied until %s\n", at, d.At.Add(d.RetryAfter).Format("15:04:05.000"))
		}
	}
	// Output:
	// t0+0s: allowed
	// t0+0s: allowed
	// t0+0s: denied until 00:00:00.100
	// t0+100ms: allowed
}

// Level reads what a key holds, exactly and without charging it, as
// x/time/rate's Tokens and TokensAt do: fractions of a token as the
// bucket refills, below zero while reservations are owed.
func ExampleLimiter_Level() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	limiter, _ := sluice.NewLimiter(store, algorithms.TokenBucket, sluice.PerSecond(4).WithBurst(4))
	ctx := context.Background()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

	limiter.At(t0).AllowN(ctx, "k", 4)
	d, _ := limiter.At(t0.Add(125*time.Millisecond)).Level(ctx, "k")
	fmt.Println(d.Level.Tokens(), d.Remaining, d.ResetAfter)

	limiter.At(t0.Add(125*time.Millisecond)).ReserveN(ctx, "k", 2, time.Second)
	d, _ = limiter.At(t0.Add(125*time.Millisecond)).Level(ctx, "k")
	fmt.Println(d.Level, d.Level.Units, "/", d.Level.PerToken)
	// Output:
	// 0.5 0 875ms
	// -1.5 -375000 / 250000
}

// AllowAtMost admits as much of a cost as fits, as redis_rate's
// AllowAtMost does: a batch of work that may be cut short.
func ExampleLimiter_AllowAtMost() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	limiter, _ := sluice.NewLimiter(store, algorithms.GCRA, sluice.PerSecond(10))
	ctx := context.Background()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

	for range 3 {
		d, _ := limiter.At(t0).AllowAtMost(ctx, "feed", 6)
		fmt.Println(d.Allowed, d.Admitted, d.RetryAfter)
	}
	// Output:
	// true 6 0s
	// true 4 0s
	// false 0 100ms
}

// A stack decides at an instant of your own as a limiter does.
func ExampleStack_At() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	stack, _ := sluice.NewStack(store,
		sluice.Rule{Name: "user", Algorithm: algorithms.TokenBucket, Limit: sluice.PerSecond(1).WithBurst(3)},
		sluice.Rule{Name: "daily", Algorithm: algorithms.FixedWindow, Limit: sluice.PerDay(100)},
	)
	ctx := context.Background()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

	v, _ := stack.At(t0.Add(time.Hour)).AllowN(ctx, []string{"u", "u"}, 3)
	fmt.Println(v.Allowed, v.At.Format(time.TimeOnly), v.Rules()[1].Remaining)
	// Output: true 01:00:00 97
}

// A stack's partial admission charges every rule the most they all
// admit, in one atomic store call.
func ExampleStack_AllowAtMost() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	stack, _ := sluice.NewStack(store,
		sluice.Rule{Name: "user", Algorithm: algorithms.TokenBucket, Limit: sluice.PerSecond(10)},
		sluice.Rule{Name: "tenant", Algorithm: algorithms.FixedWindow, Limit: sluice.PerSecond(4)},
	)
	ctx := context.Background()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

	v, _ := stack.At(t0).AllowAtMost(ctx, []string{"u1", "acme"}, 8)
	fmt.Println(v.Admitted, "admitted, bound by", stack.Rules()[v.Binding].Name)
	v, _ = stack.At(t0).AllowAtMost(ctx, []string{"u2", "acme"}, 8)
	fmt.Println(v.Allowed, "retry in", v.RetryAfter)
	// Output:
	// 4 admitted, bound by tenant
	// false retry in 1s
}

// Level reads every rule's level in one store call.
func ExampleStack_Level() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	stack, _ := sluice.NewStack(store,
		sluice.Rule{Name: "burst", Algorithm: algorithms.TokenBucket, Limit: sluice.PerSecond(2).WithBurst(4)},
		sluice.Rule{Name: "window", Algorithm: algorithms.SlidingWindowCounter, Limit: sluice.PerSecond(4)},
	)
	ctx := context.Background()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

	stack.At(t0).AllowN(ctx, []string{"k", "k"}, 4)
	v, _ := stack.At(t0.Add(1250*time.Millisecond)).Level(ctx, "k", "k")
	for i, r := range stack.Rules() {
		fmt.Println(r.Name, v.Rules()[i].Level)
	}
	// Output:
	// burst 2.5
	// window 1
}
