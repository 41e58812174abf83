package storetest_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/stores/memstore"
	"github.com/sluicehq/sluice/stores/storetest"
)

// newStore returns a memstore for the examples.
func newStore() *memstore.Store {
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	return s
}

// A Faulty in front of a store makes the store fail, slow down or stop
// answering on demand, and records what the code under test asked of it.
// Closing it closes the store.
func ExampleFaulty() {
	f := storetest.NewFaulty(newStore())
	defer f.Close()
	lim, err := sluice.NewLimiter(f, algorithms.TokenBucket, sluice.PerSecond(10))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	f.FailNext(1, storetest.ErrOutage)
	for range 2 {
		d, err := lim.Allow(ctx, "user:42")
		fmt.Println(d.Allowed, err)
	}
	fmt.Println(len(f.Requests()), "requests")
	// Output:
	// false storetest: injected outage: sluice: store unavailable
	// true <nil>
	// 2 requests
}

// FailNext fails the next calls with the error given, as it is: compare
// it with == or errors.Is.
func ExampleFaulty_FailNext() {
	f := storetest.NewFaulty(newStore())
	defer f.Close()
	lim, _ := sluice.NewLimiter(f, algorithms.GCRA, sluice.PerMinute(60))
	errTimeout := fmt.Errorf("read: %w", context.DeadlineExceeded)
	f.FailNext(2, errTimeout)
	for i := range 3 {
		_, err := lim.Allow(context.Background(), "user:42")
		fmt.Printf("call %d: %v (timeout: %v)\n", i+1, err, errors.Is(err, context.DeadlineExceeded))
	}
	// Output:
	// call 1: read: context deadline exceeded (timeout: true)
	// call 2: read: context deadline exceeded (timeout: true)
	// call 3: <nil> (timeout: false)
}

// Fail starts an outage that lasts until Heal. Behind a fail-closed
// breaker, ErrOutage gets the mode's answer: a denial marked fail-closed,
// and no error. Five failures open the circuit, and calls no longer reach
// the store.
func ExampleFaulty_Fail() {
	f := storetest.NewFaulty(newStore())
	b, err := policy.NewBreaker(f, policy.WithMode(policy.FailClosed))
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close() // closes f, which closes the memstore
	lim, _ := sluice.NewLimiter(b, algorithms.TokenBucket, sluice.PerSecond(100))
	// A new circuit does not open within a tenth of its window (see
	// policy.WithTrip).
	time.Sleep(policy.DefaultWindow / 10)
	f.Fail(storetest.ErrOutage)
	for range 10 {
		d, err := lim.Allow(context.Background(), "user:42")
		if err != nil || d.Allowed || d.Source != sluice.SourceFailClosed {
			log.Fatalf("%+v, %v", d, err)
		}
	}
	fmt.Println("10 denied, fail-closed; calls that reached the faulty store:", len(f.Calls()))
	fmt.Println("circuit:", b.State())
	// Output:
	// 10 denied, fail-closed; calls that reached the faulty store: 5
	// circuit: open
}

// SetLatency slows every call down; a call whose context ends first fails
// with the context's error and never reaches the store, as a client's
// timeout does. Inside a testing/synctest bubble the wait takes no real
// time.
func ExampleFaulty_SetLatency() {
	f := storetest.NewFaulty(newStore())
	defer f.Close()
	lim, _ := sluice.NewLimiter(f, algorithms.TokenBucket, sluice.PerSecond(10))
	f.SetLatency(20 * time.Millisecond)

	start := time.Now()
	d, err := lim.Allow(context.Background(), "user:42")
	fmt.Println(d.Allowed, err, "after at least 20ms:", time.Since(start) >= 20*time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	_, err = lim.Allow(ctx, "user:42")
	fmt.Println(errors.Is(err, context.DeadlineExceeded), err)
	// Output:
	// true <nil> after at least 20ms: true
	// true storetest: latency 20ms: context deadline exceeded
}

// Blackhole makes calls hang as they would on a Redis that stopped
// answering: until they are released, their context ends, or the store
// is closed. Held tells when the calls a test started have arrived.
func ExampleFaulty_Blackhole() {
	f := storetest.NewFaulty(newStore())
	defer f.Close()
	lim, _ := sluice.NewLimiter(f, algorithms.TokenBucket, sluice.PerSecond(10))
	release := f.Blackhole()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_, err := lim.Allow(ctx, "user:42")
	fmt.Println("with a deadline:", err)

	done := make(chan sluice.Decision)
	go func() {
		d, _ := lim.Allow(context.Background(), "user:42")
		done <- d
	}()
	for f.Held() == 0 {
		time.Sleep(time.Millisecond)
	}
	release()
	fmt.Println("released, allowed:", (<-done).Allowed)
	// Output:
	// with a deadline: storetest: blackholed: context deadline exceeded
	// released, allowed: true
}

// Heal ends every fault at once: the failures, the latency and the
// blackhole.
func ExampleFaulty_Heal() {
	f := storetest.NewFaulty(newStore())
	defer f.Close()
	f.Fail(storetest.ErrOutage)
	f.SetLatency(time.Hour)
	f.Blackhole()
	f.Heal()
	lim, _ := sluice.NewLimiter(f, algorithms.TokenBucket, sluice.PerSecond(10))
	d, err := lim.Allow(context.Background(), "user:42")
	fmt.Println(d.Allowed, err)
	// Output:
	// true <nil>
}

// Requests shows what the code under test asked of the store: here a
// stack of two rules, decided as one batch, then a limiter's peek.
func ExampleFaulty_Requests() {
	f := storetest.NewFaulty(newStore())
	defer f.Close()
	stack, _ := sluice.NewStack(f,
		sluice.Rule{Name: "user", Algorithm: algorithms.TokenBucket, Limit: sluice.PerSecond(10)},
		sluice.Rule{Name: "global", Algorithm: algorithms.TokenBucket, Limit: sluice.PerSecond(1000)},
	)
	lim, _ := sluice.NewLimiter(f, algorithms.GCRA, sluice.PerMinute(5))
	ctx := context.Background()
	stack.AllowN(ctx, []string{"user:42", "all"}, 3)
	lim.Peek(ctx, "user:42")
	for _, r := range f.Requests() {
		fmt.Printf("%s %s cost %d %v\n", r.Algorithm.Name(), r.Key, r.Cost, r.Op)
	}
	// Output:
	// token-bucket/user user:42 cost 3 charge
	// token-bucket/global all cost 3 charge
	// gcra user:42 cost 1 peek
}

// Calls tells the calls apart: a batch is one ApplyAll, and each call
// says whether it reached the store and what it returned.
func ExampleFaulty_Calls() {
	f := storetest.NewFaulty(newStore())
	defer f.Close()
	stack, _ := sluice.NewStack(f,
		sluice.Rule{Name: "user", Algorithm: algorithms.TokenBucket, Limit: sluice.PerSecond(10)},
		sluice.Rule{Name: "global", Algorithm: algorithms.TokenBucket, Limit: sluice.PerSecond(1000)},
	)
	ctx := context.Background()
	f.FailNext(1, storetest.ErrOutage)
	stack.Allow(ctx, "user:42", "all")
	stack.Allow(ctx, "user:42", "all")
	stack.Reset(ctx, "user:42", "all")
	for _, c := range f.Calls() {
		fmt.Printf("%s of %d: forwarded %v, %d decisions, error %v\n", c.Method, len(c.Requests), c.Forwarded, len(c.Decisions), c.Err)
	}
	// Output:
	// ApplyAll of 2: forwarded false, 0 decisions, error storetest: injected outage: sluice: store unavailable
	// ApplyAll of 2: forwarded true, 2 decisions, error <nil>
	// Reset of 1: forwarded true, 0 decisions, error <nil>
	// Reset of 1: forwarded true, 0 decisions, error <nil>
}

// ErrOutage is a store failure to package policy; an error of your own
// is one too if it wraps sluice.ErrUnavailable, and is otherwise the
// request's error, which a breaker passes on and does not count.
func ExampleErrOutage() {
	mine := errors.New("my backend is down")
	fmt.Println(policy.IsStoreFailure(storetest.ErrOutage))
	fmt.Println(policy.IsStoreFailure(mine))
	fmt.Println(policy.IsStoreFailure(fmt.Errorf("%w: %w", sluice.ErrUnavailable, mine)))
	// Output:
	// true
	// false
	// true
}
