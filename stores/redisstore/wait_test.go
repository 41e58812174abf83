package redisstore_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/internal/redisfaults"
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
			const d, slot = 5 * time.Second, 100 * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			deadline, _ := ctx.Deadline()
			key := t.Name()
			var mu sync.Mutex
			var slots []time.Time // each admission's instant on the server's clock
			var early []time.Duration
			var failed, cancelled atomic.Int64
			var wg sync.WaitGroup
			canary := redisfaults.StartCanary()
			for range 64 {
				wg.Go(func() {
					for {
						dec, err := lim.Wait(ctx, key)
						if err != nil {
							if ctx.Err() == nil {
								failed.Add(1) // could not fit: nothing charged
							} else {
								cancelled.Add(1) // at most a refund besides
							}
							return
						}
						at, now := dec.At.Add(dec.Delay), time.Now()
						mu.Lock()
						slots = append(slots, at)
						if now.Before(at.Add(-time.Millisecond)) {
							early = append(early, at.Sub(now))
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			stalled := canary.Stop()
			n := len(slots)
			if n < 2 {
				t.Fatalf("%d admissions", n)
			}
			slices.SortFunc(slots, time.Time.Compare)
			first, last := slots[0], slots[n-1]
			apply, all, _ := c.Counts()
			calls := apply + all
			t.Logf("%d admissions on the server's clock, the first %v after the start, the last %v after the first and %v before the deadline; %d store calls (%.2f per admission), %d waits refused at once, %d cut short by the deadline; the process stalled for %v at most",
				n, first.Sub(deadline.Add(-d)).Round(time.Millisecond), last.Sub(first).Round(time.Millisecond), deadline.Sub(last).Round(time.Millisecond),
				calls, float64(calls)/float64(n), failed.Load(), cancelled.Load(), stalled.Round(time.Millisecond))
			// The admissions are the server's to place, so they are
			// checked on its clock, which no stall of this process
			// moves: one a slot from the first to the last, and no wait
			// returning before its slot. A wait whose process stalled
			// past the deadline gives its slot back, and leaves a hole,
			// if the canary saw a stall as long.
			for i := 1; i < n; i++ {
				gap := slots[i].Sub(slots[i-1])
				switch {
				case gap < slot || gap%slot != 0:
					t.Errorf("admissions %d and %d came %v apart on the server's clock, want %v", i-1, i, gap, slot)
				case gap > slot && stalled < deadline.Sub(slots[i-1].Add(slot)):
					t.Errorf("admissions %d and %d came %v apart on the server's clock, want %v: a stall of %v at most cannot have held the waits between them past the deadline", i-1, i, gap, slot, stalled.Round(time.Millisecond))
				case gap > slot:
					t.Logf("admissions %d and %d came %v apart: a stall of %v held the waits between them past the deadline", i-1, i, gap, stalled.Round(time.Millisecond))
				}
			}
			if len(early) > 0 {
				t.Errorf("%d waits returned before their admission, by up to %v", len(early), slices.Max(early))
			}
			// No wait admits past its deadline, whatever the process's
			// stalls: a slot the server gives past it (it counts the
			// wait from its own instant, a call's latency later than the
			// time left was measured) is given back once the deadline
			// has passed.
			before := deadline.Sub(last)
			if before < 0 {
				t.Errorf("the last admission came %v after the deadline", -before)
			}
			// The waits go on to the deadline: the last slot is the
			// last before it, unless a stall of this process (which the
			// canary measures) held the last waits past the deadline.
			if before >= 2*slot {
				msg := fmt.Sprintf("the last admission came %v before the deadline, want within the last two slots before it", before)
				if stalled < slot/2 {
					t.Error(msg)
				} else {
					t.Logf("%s: a stall of %v at most held the waits", msg, stalled.Round(time.Millisecond))
				}
			}
			// A call per admission, one per refused wait, and a
			// reservation and its refund per wait the deadline cut short.
			if want := int64(n) + failed.Load() + 2*cancelled.Load(); calls > want {
				t.Errorf("%d store calls, want at most %d: one per wait", calls, want)
			}
		})
	}
}
