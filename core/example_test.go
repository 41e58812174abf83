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
			fmt.Printf("request %d denied: retry in %v\n", i, d.RetryAfter.Round(100*time.Millisecond))
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

// Wait queues callers on a key instead of turning them away: each call
// reserves its token in the store (one call, in Redis as in memory) and
// sleeps until the token is due.
func ExampleLimiter_Wait() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	limiter, _ := core.NewLimiter(store, algorithms.TokenBucket, core.PerSecond(20).WithBurst(1))

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
	limiter, _ := core.NewLimiter(store, algorithms.TokenBucket, core.PerSecond(1).WithBurst(1))
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
	stack, err := core.NewStack(store,
		core.Rule{Name: "burst", Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(5).WithBurst(10)},
		core.Rule{Name: "daily", Algorithm: algorithms.TokenBucket, Limit: core.PerDay(1000)},
		core.Rule{Name: "tenant", Algorithm: algorithms.SlidingWindowCounter, Limit: core.PerSecond(100)},
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
				i, stack.Rules()[v.Binding].Name, v.Rules[1].Remaining)
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
	limiter, _ := core.NewLimiter(store, algorithms.Concurrency, core.Per(2, time.Minute))
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
	limiter, _ := core.NewLimiter(store, algorithms.TokenBucket, core.PerSecond(10).WithBurst(5))
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
// limiter's Allow. Its Result maps to core.Decision: Allowed > 0 is
// Allowed for a cost of 1 or more (a cost of 0 is always allowed here,
// where redis_rate reports 0 allowed), Allowed of AllowAtMost is Admitted,
// and Remaining, RetryAfter and ResetAfter keep their meaning (RetryAfter
// is 0 when allowed, not -1).
func Example_fromRedisRate() {
	store, _ := memstore.New(memstore.Config{}) // redisstore.New(client, redisstore.Config{}) in production
	defer store.Close()
	// redis_rate.PerSecond(10): rate 10, burst 10, period 1s
	limiter, _ := core.NewLimiter(store, algorithms.GCRA, core.PerSecond(10))
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
