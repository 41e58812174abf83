package redisstore_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/stores/redisstore"
	"github.com/sluicehq/sluice/stores/rueidisstore"
	"github.com/sluicehq/sluice/stores/storetest"
)

// TestWaitFollowsTheRate has 64 goroutines Wait on one key at 10/s for
// 5 s, through each Redis store on the server's clock. Reservations queue
// the waiters in Redis, so admissions come one every 100ms with no polling:
// each Wait is one call, and each goroutine ends with one call that cannot
// fit before the deadline (or a reservation the deadline cuts short, and
// its refund).
func TestWaitFollowsTheRate(t *testing.T) {
	addr := testAddr(t)
	stores := map[string]func(t *testing.T) sluice.Store{
		"redisstore": func(t *testing.T) sluice.Store {
			c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			s, err := redisstore.New(c, redisstore.Config{Prefix: "wait:"})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		"rueidisstore": func(t *testing.T) sluice.Store {
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			s, err := rueidisstore.New(c, rueidisstore.Config{Prefix: "wait:"})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := storetest.NewCounter(open(t))
			lim, err := sluice.NewLimiter(c, algorithms.TokenBucket, sluice.PerSecond(10).WithBurst(1))
			if err != nil {
				t.Fatal(err)
			}
			const d = 5 * time.Second
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			key := t.Name()
			start := time.Now()
			var mu sync.Mutex
			var at []time.Duration
			var failed, cancelled atomic.Int64
			var wg sync.WaitGroup
			for range 64 {
				wg.Go(func() {
					for {
						if _, err := lim.Wait(ctx, key); err != nil {
							if ctx.Err() == nil {
								failed.Add(1) // could not fit: nothing charged
							} else {
								cancelled.Add(1) // at most a refund besides
							}
							return
						}
						mu.Lock()
						at = append(at, time.Since(start))
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			n := len(at)
			if n < 2 {
				t.Fatalf("%d admissions", n)
			}
			rate := float64(n-1) / (at[n-1] - at[0]).Seconds()
			apply, all, _ := c.Counts()
			calls := apply + all
			perAdmission := float64(calls) / float64(n)
			t.Logf("%d admissions in %v, first at %v, last at %v: %.3f/s; %d store calls (%.2f per admission), %d waits refused at once, %d cut short by the deadline",
				n, d, at[0].Round(time.Millisecond), at[n-1].Round(time.Millisecond), rate, calls, perAdmission, failed.Load(), cancelled.Load())
			if rate < 9.9 || rate > 10.1 {
				t.Errorf("admissions came at %.3f/s, want 10/s within 1%%", rate)
			}
			if n < 49 || n > 51 {
				t.Errorf("%d admissions in 5s at 10/s with a burst of 1, want 50 or 51", n)
			}
			// A call per admission, one per refused wait, and a
			// reservation and its refund per wait the deadline cut short.
			if want := int64(n) + failed.Load() + 2*cancelled.Load(); calls > want {
				t.Errorf("%d store calls, want at most %d: one per wait", calls, want)
			}
		})
	}
}
