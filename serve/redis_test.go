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

// chain is what sluice serve runs: telemetry around a breaker around the
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
			sameMinute(t, func(t *testing.T) bool {
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
						t.Errorf("step %d: %s, want %s", i, got, s.want)
						return false
					}
				}
				return true
			})
		})
	}
}

// TestRedisDown kills Redis under load, in each breaker mode: every
// request is answered, none with an error, within the breaker's deadline
// and the mode's answer.
//
// It times answers, so it runs alone (not in parallel).
func TestRedisDown(t *testing.T) {
	const timeout = 100 * time.Millisecond
	for _, c := range clients {
		for _, mode := range []policy.Mode{policy.FailOpen, policy.FailClosed} {
			t.Run(c.name+"/"+mode.String(), func(t *testing.T) {
				srv := redistest.Start(t)
				h := start(t, api, chain(t, c.open(t, srv.Addr(), "serve-down:"), mode, timeout))
				var (
					mu        sync.Mutex
					latencies []time.Duration
					errs      int
					answers   = map[string]int{}
				)
				killed := make(chan struct{})
				var killedAt time.Time // written before killed closes
				var wg sync.WaitGroup
				for i := range 64 {
					wg.Go(func() {
						req := request("api", desc(fmt.Sprintf("tenant=t%d", i)))
						deadline := time.Now().Add(1500 * time.Millisecond)
						for time.Now().Before(deadline) {
							began := time.Now()
							resp, err := h.client.ShouldRateLimit(context.Background(), req)
							took := time.Since(began)
							// Only calls begun after the kill are judged.
							down := false
							select {
							case <-killed:
								down = began.After(killedAt)
							default:
							}
							mu.Lock()
							if err != nil {
								errs++
							} else if down {
								latencies = append(latencies, took)
								answers[outcome(resp)]++
							}
							mu.Unlock()
						}
					})
				}
				time.Sleep(500 * time.Millisecond)
				if err := srv.Kill(); err != nil {
					t.Fatal(err)
				}
				killedAt = time.Now()
				close(killed)
				wg.Wait()
				if errs > 0 {
					t.Errorf("%d requests failed; the breaker should answer every one", errs)
				}
				if len(latencies) == 0 {
					t.Fatal("no request was answered after the kill")
				}
				slices.Sort(latencies)
				p99, worst := latencies[len(latencies)*99/100], latencies[len(latencies)-1]
				t.Logf("after the kill: %d answers %v; p99 %v, slowest %v (deadline %v)", len(latencies), answers, p99, worst, timeout)
				if worst > timeout+400*time.Millisecond {
					t.Errorf("the slowest answer took %v, past the deadline of %v", worst, timeout)
				}
				want := map[policy.Mode]string{policy.FailOpen: "OK|OK", policy.FailClosed: "OVER_LIMIT|OVER_LIMIT:0"}[mode]
				if answers[want] == 0 {
					t.Errorf("no %s answer after the kill: %v", want, answers)
				}
			})
		}
	}
}
