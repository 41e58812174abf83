package serve

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/redisstore"
	"github.com/sluicehq/sluice/stores/rueidisstore"
	"github.com/sluicehq/sluice/telemetry"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// clients are the two Redis stores, each opened on addr under prefix,
// with the client options docs/redis.md recommends behind a breaker.
var clients = []struct {
	name string
	open func(t testing.TB, addr, prefix string) core.Store
}{
	{"rueidis", func(t testing.TB, addr, prefix string) core.Store {
		c, err := rueidis.NewClient(rueidisstore.ClientOption([]string{addr}, 0))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		s, err := rueidisstore.New(c, rueidisstore.Config{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}},
	{"go-redis", func(t testing.TB, addr, prefix string) core.Store {
		c := redis.NewUniversalClient(redisstore.ClientOptions([]string{addr}, 0))
		t.Cleanup(func() { c.Close() })
		s, err := redisstore.New(c, redisstore.Config{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}},
}

// chain is what sluice-serve runs: telemetry around a breaker around the
// store.
func chain(t testing.TB, remote core.Store, mode policy.Mode, timeout time.Duration) core.Store {
	t.Helper()
	b, err := policy.NewBreaker(remote, policy.WithMode(mode), policy.WithTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	s, err := telemetry.New(b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestRedis decides through the whole chain on a real redis-server: the
// same answers as in memory, the atomic stack included.
func TestRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			sameMinute(t, func() error {
				prefix := fmt.Sprintf("serve-test:%s:%d:", c.name, time.Now().UnixNano())
				h := start(t, api, chain(t, c.open(t, srv.Addr(), prefix), policy.FailOpen, time.Second))
				defer h.stop()
				steps := []struct {
					req  *rlsv3.RateLimitRequest
					want string
				}{
					{request("api", desc("user=a")), "OK|OK:2"},
					{request("api", desc("path=/login"), desc("tenant=t")), "OK|OK:0,OK:4"},
					{request("api", desc("path=/login"), desc("tenant=t")), "OVER_LIMIT|OVER_LIMIT:0,OK:4"},
					{request("api", desc("tenant=t")), "OK|OK:3"},
					{request("api", desc("experiment=x"), desc("tenant=t")), "OK|OK:0,OK:2"},
					{request("api", desc("experiment=x"), desc("tenant=t")), "OK|OK:0,OK:1"},
					{request("api", withHits(desc("bucket=b"), 5)), "OVER_LIMIT|OVER_LIMIT:4"},
					{request("api", withHits(desc("bucket=b"), 4)), "OK|OK:0"},
				}
				for i, s := range steps {
					if got := outcome(h.ask(t, s.req)); got != s.want {
						return fmt.Errorf("step %d: %s, want %s", i, got, s.want)
					}
				}
				return nil
			})
		})
	}
}

// TestRedisDown kills Redis under load, in each breaker mode: every
// request is answered, none with an error, and every one begun after the
// kill gets the mode's answer.
//
// What it asserts is what a stall of the process cannot break: no
// answer is judged by its wall time (a loaded machine once answered one
// 527 ms after the kill, against a deadline of 100 ms, with the breaker
// working as it should); each call's own context ends only after 10 s,
// so that a call the breaker failed to bound fails the test as an error.
// The run lasts until every caller has had answers after the kill,
// however long the machine takes to give them.
func TestRedisDown(t *testing.T) {
	const (
		timeout   = 100 * time.Millisecond
		callers   = 64
		afterKill = 3 // answers each caller gets after the kill
	)
	for _, c := range clients {
		for _, mode := range []policy.Mode{policy.FailOpen, policy.FailClosed} {
			t.Run(c.name+"/"+mode.String(), func(t *testing.T) {
				t.Parallel()
				srv := redistest.Start(t)
				h := start(t, api, chain(t, c.open(t, srv.Addr(), "serve-down:"), mode, timeout))
				var (
					mu         sync.Mutex
					latencies  []time.Duration
					errs       []error
					answers    = map[string]int{}
					beforeKill int
				)
				killed := make(chan struct{})
				var wg sync.WaitGroup
				for i := range callers {
					wg.Go(func() {
						req := request("api", desc(fmt.Sprintf("tenant=t%d", i)))
						for n := 0; n < afterKill; {
							down := false
							select {
							case <-killed:
								down = true // begun after the kill
							default:
							}
							ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
							began := time.Now()
							resp, err := h.client.ShouldRateLimit(ctx, req)
							took := time.Since(began)
							cancel()
							mu.Lock()
							switch {
							case err != nil:
								errs = append(errs, err)
							case down:
								latencies = append(latencies, took)
								answers[outcome(resp)]++
								n++
							default:
								beforeKill++
							}
							mu.Unlock()
							if err != nil {
								return
							}
						}
					})
				}
				// Let the load run until the callers have had answers
				// from Redis; a stalled machine makes this wait longer.
				for {
					time.Sleep(50 * time.Millisecond)
					mu.Lock()
					n, failed := beforeKill, len(errs)
					mu.Unlock()
					if n >= callers || failed > 0 {
						break
					}
				}
				if err := srv.Kill(); err != nil {
					t.Fatal(err)
				}
				close(killed)
				wg.Wait()
				if len(errs) > 0 {
					t.Fatalf("%d requests failed, the first: %v; the breaker should answer every one", len(errs), errs[0])
				}
				slices.Sort(latencies)
				p99, worst := latencies[len(latencies)*99/100], latencies[len(latencies)-1]
				t.Logf("after the kill: %d answers %v; p99 %v, slowest %v (deadline %v)", len(latencies), answers, p99, worst, timeout)
				want := map[policy.Mode]string{policy.FailOpen: "OK|OK", policy.FailClosed: "OVER_LIMIT|OVER_LIMIT:0"}[mode]
				if answers[want] != len(latencies) {
					t.Errorf("after the kill, %d of %d answers were %s, the mode's: %v", answers[want], len(latencies), want, answers)
				}
			})
		}
	}
}
