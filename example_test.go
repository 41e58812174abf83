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

// The README's quick start: a token bucket of 10 requests a second in
// bursts of 50, per key, on the in-memory store.
func Example() {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	limiter, err := sluice.NewLimiter(store, algorithms.TokenBucket, sluice.PerSecond(10).WithBurst(50))
	if err != nil {
		log.Fatal(err)
	}
	for i := 1; ; i++ {
		d, err := limiter.Allow(context.Background(), "user:42")
		if err != nil {
			log.Fatal(err) // the store failed; a denial is not an error
		}
		if !d.Allowed {
			fmt.Printf("request %d denied: retry in %v\n", i, d.RetryAfter.Round(100*time.Millisecond))
			break
		}
	}
	// Output: request 51 denied: retry in 100ms
}

// Wait queues callers on a key instead of turning them away: each call
// reserves its token in the store (one call, in Redis as in memory) and
// sleeps until the token is due.
func ExampleLimiter_Wait() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	limiter, _ := sluice.NewLimiter(store, algorithms.TokenBucket, sluice.PerSecond(20).WithBurst(1))

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	for range 3 {
		if _, err := limiter.Wait(ctx, "batch-job"); err != nil {
			log.Fatal(err)
		}
	}
	// The first token is there; the next two come 50ms apart.
	fmt.Println("3 calls at 20/s took at least 100ms:", time.Since(start) >= 99*time.Millisecond)
	// Output: 3 calls at 20/s took at least 100ms: true
}

// Reserve charges now for work that may start later; a reservation the
// caller will not use is cancelled and its capacity given back.
func ExampleLimiter_Reserve() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	limiter, _ := sluice.NewLimiter(store, algorithms.TokenBucket, sluice.PerSecond(1).WithBurst(1))
	ctx := context.Background()

	limiter.Allow(ctx, "k") // the only token
	r, err := limiter.Reserve(ctx, "k", 5*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("reserved: %v, act in %v\n", r.OK(), r.Delay.Round(100*time.Millisecond))
	if d, _ := limiter.Peek(ctx, "k"); !d.Allowed {
		fmt.Printf("meanwhile others wait %v\n", d.RetryAfter.Round(100*time.Millisecond))
	}
	r.Cancel(ctx) // the work was called off
	if d, _ := limiter.Peek(ctx, "k"); !d.Allowed {
		fmt.Printf("after the cancel, %v\n", d.RetryAfter.Round(100*time.Millisecond))
	}
	// Output:
	// reserved: true, act in 1s
	// meanwhile others wait 2s
	// after the cancel, 1s
}

// A Stack checks several limits as one: a burst limit and a daily quota
// per user, and a limit for the whole tenant. A request any of them
// denies is charged to none.
func ExampleStack() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	stack, err := sluice.NewStack(store,
		sluice.Rule{Name: "burst", Algorithm: algorithms.TokenBucket, Limit: sluice.PerSecond(5).WithBurst(10)},
		sluice.Rule{Name: "daily", Algorithm: algorithms.TokenBucket, Limit: sluice.PerDay(1000)},
		sluice.Rule{Name: "tenant", Algorithm: algorithms.SlidingWindowCounter, Limit: sluice.PerSecond(100)},
	)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for i := 1; i <= 11; i++ {
		v, err := stack.Allow(ctx, "user:42", "user:42", "tenant:7")
		if err != nil {
			log.Fatal(err)
		}
		if !v.Allowed {
			// The rules that admitted say what they would have left:
			// nothing was charged to them.
			fmt.Printf("request %d denied by %q (the daily quota would have had %d left)\n",
				i, stack.Rules()[v.Binding].Name, v.Rules()[1].Remaining)
		}
	}
	// Output: request 11 denied by "burst" (the daily quota would have had 989 left)
}

// Acquire holds one of a key's concurrency slots while work runs: at most
// 2 reports render at once per tenant, and a worker that dies without
// releasing its lease loses it after a minute.
func ExampleLimiter_Acquire() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	limiter, _ := sluice.NewLimiter(store, algorithms.Concurrency, sluice.Per(2, time.Minute))
	ctx := context.Background()

	a, _ := limiter.Acquire(ctx, "tenant:7")
	b, _ := limiter.Acquire(ctx, "tenant:7")
	c, _ := limiter.Acquire(ctx, "tenant:7")
	fmt.Println(a.OK(), b.OK(), c.OK())
	a.Release(ctx) // the first report is done
	d, _ := limiter.Acquire(ctx, "tenant:7")
	fmt.Println(d.OK(), d.Remaining)
	// Output:
	// true true false
	// true 0
}

// Coming from golang.org/x/time/rate: rate.NewLimiter(10, 5) is one
// bucket; a sluice limiter is a bucket per key, in memory or in Redis.
// lim.Allow() becomes limiter.Allow(ctx, key), lim.Wait(ctx) becomes
// limiter.Wait(ctx, key), and lim.Reserve() limiter.Reserve(ctx, key,
// maxWait). Calls at an instant of your own, AllowN(t, n) and
// TokensAt(t), go through limiter.At(t).
func Example_fromTimeRate() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	// rate.NewLimiter(rate.Limit(10), 5)
	limiter, _ := sluice.NewLimiter(store, algorithms.TokenBucket, sluice.PerSecond(10).WithBurst(5))
	ctx := context.Background()
	allowed := 0
	for range 8 {
		if d, _ := limiter.Allow(ctx, "global"); d.Allowed { // lim.Allow()
			allowed++
		}
	}
	fmt.Println("allowed", allowed, "of 8 at once")

	t := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	limiter.At(t).AllowN(ctx, "replay", 4)                              // lim.AllowN(t, 4)
	d, _ := limiter.At(t.Add(50*time.Millisecond)).Level(ctx, "replay") // lim.TokensAt(t + 50ms)
	fmt.Println("tokens", d.Level.Tokens())
	// Output:
	// allowed 5 of 8 at once
	// tokens 1.5
}

// Coming from go-redis/redis_rate: redis_rate is GCRA in Redis, and
// limiter.Allow(ctx, key, redis_rate.PerSecond(10)) becomes a GCRA
// limiter's Allow. Its Result maps to sluice.Decision: Allowed > 0 is
// Allowed for a cost of 1 or more (a cost of 0 is always allowed here,
// where redis_rate reports 0 allowed), Allowed of AllowAtMost is Admitted,
// and Remaining, RetryAfter and ResetAfter keep their meaning (RetryAfter
// is 0 when allowed, not -1).
func Example_fromRedisRate() {
	store, _ := memstore.New(memstore.Config{}) // redisstore.New(client, redisstore.Config{}) in production
	defer store.Close()
	// redis_rate.PerSecond(10): rate 10, burst 10, period 1s
	limiter, _ := sluice.NewLimiter(store, algorithms.GCRA, sluice.PerSecond(10))
	ctx := context.Background()
	for i := 1; ; i++ {
		d, err := limiter.Allow(ctx, "project:123")
		if err != nil {
			log.Fatal(err)
		}
		if !d.Allowed {
			fmt.Printf("request %d denied, retry in %v\n", i, d.RetryAfter.Round(100*time.Millisecond))
			break
		}
	}
	// limiter.AllowAtMost(ctx, key, limit, 5) on another key
	d, _ := limiter.AllowAtMost(ctx, "project:456", 5)
	fmt.Println("admitted", d.Admitted)
	// Output:
	// request 11 denied, retry in 100ms
	// admitted 5
}
