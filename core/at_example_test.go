package core_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores/memstore"
)

// At decides at instants of your own, as x/time/rate's AllowN(t, n) does:
// for tests, replays and simulations. Each decision reports the instant
// it was made at, so a wait becomes an absolute time.
func ExampleLimiter_At() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	limiter, _ := core.NewLimiter(store, algorithms.TokenBucket, core.PerSecond(10).WithBurst(2))
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
	limiter, _ := core.NewLimiter(store, algorithms.TokenBucket, core.PerSecond(4).WithBurst(4))
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
	limiter, _ := core.NewLimiter(store, algorithms.GCRA, core.PerSecond(10))
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
	stack, _ := core.NewStack(store,
		core.Rule{Name: "user", Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(1).WithBurst(3)},
		core.Rule{Name: "daily", Algorithm: algorithms.FixedWindow, Limit: core.PerDay(100)},
	)
	ctx := context.Background()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

	v, _ := stack.At(t0.Add(time.Hour)).AllowN(ctx, []string{"u", "u"}, 3)
	fmt.Println(v.Allowed, v.At.Format(time.TimeOnly), v.Rules[1].Remaining)
	// Output: true 01:00:00 97
}

// A stack's partial admission charges every rule the most they all
// admit, in one atomic store call.
func ExampleStack_AllowAtMost() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	stack, _ := core.NewStack(store,
		core.Rule{Name: "user", Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(10)},
		core.Rule{Name: "tenant", Algorithm: algorithms.FixedWindow, Limit: core.PerSecond(4)},
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
	stack, _ := core.NewStack(store,
		core.Rule{Name: "burst", Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(2).WithBurst(4)},
		core.Rule{Name: "window", Algorithm: algorithms.SlidingWindowCounter, Limit: core.PerSecond(4)},
	)
	ctx := context.Background()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

	stack.At(t0).AllowN(ctx, []string{"k", "k"}, 4)
	v, _ := stack.At(t0.Add(1250*time.Millisecond)).Level(ctx, "k", "k")
	for i, r := range stack.Rules() {
		fmt.Println(r.Name, v.Rules[i].Level)
	}
	// Output:
	// burst 2.5
	// window 1
}

// A Level is exact: Units/PerToken tokens.
func ExampleLevel() {
	l := core.Level{Units: -3, PerToken: 8}
	fmt.Println(l.Tokens(), l, l.Known(), core.Level{}.Known())
	// Output: -0.375 -0.375 true false
}

// Run is what a store of your own runs under its lock for each request:
// the algorithm's transition, the decision's instant, and partial
// admissions.
func ExampleRun() {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var state core.State // the key's state, which a store keeps
	req := core.Request{Key: "k", Algorithm: algorithms.FixedWindow, Limit: core.PerMinute(5), Cost: 3, Op: core.OpAtMost, Now: t0}
	for range 2 {
		d := core.Run(&state, &req, 0) // 0: the store's clock, unused with a Now
		fmt.Println(d.Allowed, d.Admitted, d.Level, d.At.Format(time.TimeOnly))
	}
	// Output:
	// true 3 2 00:00:00
	// true 2 0 00:00:00
}

// RunAll decides a batch together: a batch of partial admissions charges
// every request the most all of them admit.
func ExampleRunAll() {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	states := make([]core.State, 2)
	reqs := []core.Request{
		{Key: "u", Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(10), Cost: 8, Op: core.OpAtMost, Now: t0},
		{Key: "t", Algorithm: algorithms.FixedWindow, Limit: core.PerSecond(5), Cost: 8, Op: core.OpAtMost, Now: t0},
	}
	out := make([]core.Decision, 2)
	all := core.RunAll(states, reqs, 0, out)
	fmt.Println(all, out[0].Admitted, out[0].Level, out[1].Admitted, out[1].Level)
	// Output: true 5 5 5 0
}

// AtMost is the cost a partial admission charges: what fits, up to the
// most asked for, or 1, which the key then denies.
func ExampleAtMost() {
	fmt.Println(core.AtMost(7, 3), core.AtMost(2, 3), core.AtMost(0, 3))
	// Output: 3 2 1
}

// A decorator that answers without its store (an outage policy, a list)
// stamps its answer with the request's instant.
func ExampleRequest_Answer() {
	req := core.Request{Key: "k", Cost: 4, Op: core.OpAtMost, Now: time.Date(2030, 1, 1, 0, 0, 0, 1500, time.UTC)}
	d := req.Answer(core.Decision{Allowed: true, Source: core.SourceFailOpen})
	fmt.Println(d.Admitted, d.At.Format(time.RFC3339Nano), d.Source)
	// Output: 4 2030-01-01T00:00:00.000001Z fail-open
}
