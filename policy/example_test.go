package policy_test

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/stores"
	"github.com/sluicehq/sluice/stores/memstore"
)

// A breaker over a Redis that is down, in degrade mode: a fleet of 4
// instances shares 100 requests a minute, so each decides locally under
// 25. A login limiter answers fail-closed over the same circuit.
func Example() {
	// A store standing in for a Redis that refuses connections.
	down := stores.Func(func(context.Context, core.Request) (core.Decision, error) {
		return core.Decision{}, fmt.Errorf("dial tcp 10.0.0.7:6379: %w", syscall.ECONNREFUSED)
	})
	// While it is down, each instance decides on a store of its own.
	local, err := memstore.New(memstore.Config{MaxKeys: 100_000})
	if err != nil {
		panic(err)
	}
	breaker, err := policy.NewBreaker(down,
		policy.WithMode(policy.Degrade),
		policy.WithLocal(local), // the breaker closes it
		policy.WithInstances(4),
		policy.WithWindow(100*time.Millisecond),
		policy.WithOnChange(func(c policy.Change) { fmt.Printf("circuit %s: %s → %s\n", c.Name, c.From, c.To) }),
	)
	if err != nil {
		panic(err)
	}
	defer breaker.Close()
	// A new circuit does not trip within a tenth of its window: a client's
	// first calls open its connections, and may be slow together.
	time.Sleep(10 * time.Millisecond)
	api, err := sluice.NewLimiter(breaker, algorithms.TokenBucket, core.PerMinute(100))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	admitted := 0
	for range 40 {
		d, err := api.Allow(ctx, "user:42")
		if err != nil {
			panic(err) // never: the store's failures are answered by the mode
		}
		if d.Allowed {
			admitted++
		}
	}
	fmt.Printf("api: %d of 40 admitted, circuit %s\n", admitted, breaker.State())

	failClosed, err := breaker.WithMode(policy.FailClosed)
	if err != nil {
		panic(err)
	}
	login, err := sluice.NewLimiter(failClosed, algorithms.GCRA, core.PerMinute(5))
	if err != nil {
		panic(err)
	}
	d, _ := login.Allow(ctx, "user:42")
	fmt.Printf("login: allowed %v, source %v\n", d.Allowed, d.Source)
	// Output:
	// circuit sluice: closed → open
	// api: 25 of 40 admitted, circuit open
	// login: allowed false, source fail-closed
}

// A stack of two rules, a per-user limit and a global one, over a
// breaker in degrade mode while Redis is down: the whole stack is decided
// on the local store, each rule under its share among 4 instances (25 of
// 100 a minute per user, 10 of 40 a minute in all), and a request either
// rule denies charges neither.
func Example_stack() {
	down := stores.Func(func(context.Context, core.Request) (core.Decision, error) {
		return core.Decision{}, fmt.Errorf("dial tcp 10.0.0.7:6379: %w", syscall.ECONNREFUSED)
	})
	local, err := memstore.New(memstore.Config{})
	if err != nil {
		panic(err)
	}
	breaker, err := policy.NewBreaker(down, policy.WithMode(policy.Degrade), policy.WithLocal(local), policy.WithInstances(4))
	if err != nil {
		panic(err)
	}
	defer breaker.Close()
	stack, err := sluice.NewStack(breaker,
		sluice.Rule{Name: "user", Algorithm: algorithms.TokenBucket, Limit: core.PerMinute(100)},
		sluice.Rule{Name: "global", Algorithm: algorithms.GCRA, Limit: core.PerMinute(40)},
	)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	admitted := 0
	var last sluice.Verdict
	for range 30 {
		v, err := stack.Allow(ctx, "user:42", "all")
		if err != nil {
			panic(err) // never: the store's failures are answered by the mode
		}
		if v.Allowed {
			admitted++
		}
		last = v
	}
	fmt.Printf("%d of 30 admitted\n", admitted)
	fmt.Printf("last: allowed %v, bound by %q; user: %v, %d left; global: %v, %d left\n", last.Allowed,
		stack.Rules()[last.Binding].Name, last.Rules()[0].Source, last.Rules()[0].Remaining, last.Rules()[1].Source, last.Rules()[1].Remaining)
	// Output:
	// 10 of 30 admitted
	// last: allowed false, bound by "global"; user: degraded, 14 left; global: degraded, 0 left
}

// IsStoreFailure tells a store's failure from a caller who gave up.
func ExampleIsStoreFailure() {
	for _, err := range []error{
		fmt.Errorf("redisstore: gcra: %w", syscall.ECONNRESET),
		fmt.Errorf("redisstore: gcra: %w", context.DeadlineExceeded),
		fmt.Errorf("redisstore: gcra: %w", context.Canceled),
		fmt.Errorf("redisstore: gcra: %w", core.ErrInvalidKey),
	} {
		fmt.Printf("%v: %v\n", err, policy.IsStoreFailure(err))
	}
	// Output:
	// redisstore: gcra: connection reset by peer: true
	// redisstore: gcra: context deadline exceeded: true
	// redisstore: gcra: context canceled: false
	// redisstore: gcra: sluice: invalid key: false
}

// New applies per-key policy: a higher tier for "pro:" keys, an allow
// list for health checks, and shadow mode for a new, stricter limit that
// is rolled out without turning anyone away yet.
func ExampleNew() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	would := 0
	p, err := policy.New(store,
		policy.WithOverride(func(req core.Request) core.Limit {
			if strings.HasPrefix(req.Key, "pro:") {
				return core.PerSecond(100)
			}
			return req.Limit
		}),
		policy.WithAllowList(func(key string) bool { return key == "health-check" }),
		policy.WithShadow(func(core.Request, core.Decision) { would++ }),
	)
	if err != nil {
		panic(err)
	}
	limiter, _ := sluice.NewLimiter(p, algorithms.TokenBucket, core.PerSecond(2))
	ctx := context.Background()
	for _, key := range []string{"free:1", "pro:1", "health-check"} {
		allowed := 0
		for range 10 {
			if d, _ := limiter.Allow(ctx, key); d.Allowed {
				allowed++
			}
		}
		fmt.Printf("%s: %d of 10 allowed\n", key, allowed)
	}
	fmt.Println("denials shadow mode let through:", would)
	// Output:
	// free:1: 10 of 10 allowed
	// pro:1: 10 of 10 allowed
	// health-check: 10 of 10 allowed
	// denials shadow mode let through: 8
}
