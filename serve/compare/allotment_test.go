package compare

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/redistest"
)

// allotmentConfig gives allotments of 50 to a hot descriptor of 2000 an
// hour, and to a cold one and a per-user one of a million an hour, which
// a test never reaches.
const allotmentConfig = `
domain: api
descriptors:
  - key: hot
    rate_limit: {unit: hour, requests_per_unit: 2000, allotment: 50}
  - key: cold
    rate_limit: {unit: hour, requests_per_unit: 1000000, allotment: 50}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000000, allotment: 50}
`

// TestAllotmentTwoServers runs two sluice-serve processes on one Redis,
// each taking allotments of a hot descriptor, and sends both 4000
// requests of it from 16 streams: together they admit no more than its
// limit, 2000 in the hour (an allotment is charged to Redis before it is
// spent, and under the fixed window it lapses with its window), with
// the decisions the breaker answered in its mode (fail-open) besides,
// when a loaded machine held a take past its deadline, and no
// less than the limit less what allotments may strand: fewer than an
// allotment per server each time one lapses unspent (after its 1 s) and
// once at the end; so the bound
// widens with the time the run took, which a stalled machine lengthens.
// Then a cold descriptor far under its limit, with a per-user one beside
// it in each request, both with allotments: every request is admitted,
// each decided from the two allotments together, and Redis is called for
// the takes alone, a fraction of the decisions.
func TestAllotmentTwoServers(t *testing.T) {
	if _, err := SluiceBinary(); err != nil {
		t.Skipf("sluice-serve does not build: %v", err)
	}
	t.Parallel()
	r := redistest.Start(t)
	servers := []*Server{
		StartSluice(t, SluiceConfig{Redis: r.Addr(), Config: allotmentConfig}),
		StartSluice(t, SluiceConfig{Redis: r.Addr(), Config: allotmentConfig}),
	}
	var clients []rlsv3.RateLimitServiceClient
	for _, s := range servers {
		conn, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		clients = append(clients, rlsv3.NewRateLimitServiceClient(conn))
	}
	desc := func(k, v string) *rlcommon.RateLimitDescriptor {
		return &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: k, Value: v}}}
	}
	// run sends n requests from 8 streams to each server and returns how
	// many were admitted, the Redis calls they cost, and how long it took.
	run := func(n int64, req func(i int64) *rlsv3.RateLimitRequest) (admitted, calls int64, took time.Duration) {
		t.Helper()
		before, err := CommandStats(r)
		if err != nil {
			t.Fatal(err)
		}
		var sent, ok atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for _, c := range clients {
			for range 8 {
				wg.Go(func() {
					for {
						i := sent.Add(1)
						if i > n {
							return
						}
						resp, err := c.ShouldRateLimit(context.Background(), req(i))
						if err != nil {
							t.Errorf("request %d: %v", i, err)
							return
						}
						if resp.OverallCode == rlsv3.RateLimitResponse_OK {
							ok.Add(1)
						}
					}
				})
			}
		}
		wg.Wait()
		took = time.Since(start)
		after, err := CommandStats(r)
		if err != nil {
			t.Fatal(err)
		}
		d := after.Sub(before)
		return ok.Load(), d["evalsha"] + d["eval"], took
	}

	const limit, size, servers2 = 2000, 50, 2
	hour := time.Now().Unix() / 3600
	admitted, calls, took := run(2*limit, func(int64) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommon.RateLimitDescriptor{desc("hot", "x")}}
	})
	windows := time.Now().Unix()/3600 - hour + 1
	lapses := int64(took/time.Second) + 1
	low := limit - servers2*size*(lapses+1)
	// A take that a loaded machine held past the breaker's deadline is
	// answered by the mode, fail-open: admitted, and charged nowhere.
	var byMode int64
	for _, s := range servers {
		byMode += int64(series(t, s, "sluice_rls_store_down_total"))
	}
	t.Logf("hot: %d admitted of %d requests (limit %d; %d answered by the mode), %d Redis script calls, in %v", admitted, 2*limit, limit, byMode, calls, took)
	if admitted > limit*windows+byMode {
		t.Errorf("hot: %d admitted, more than the limit, %d in each of %d windows, and the %d the mode answered", admitted, limit, windows, byMode)
	}
	if windows == 1 && admitted < low {
		t.Errorf("hot: %d admitted, fewer than %d: the limit less an allotment per server for each of %d lapses and the end", admitted, low, lapses)
	}

	const n = 2000
	admitted, calls, took = run(n, func(i int64) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommon.RateLimitDescriptor{desc("cold", "x"), desc("user", fmt.Sprint(i%4))}}
	})
	t.Logf("cold and user: %d admitted of %d, %d Redis script calls, in %v", admitted, n, calls, took)
	if admitted != n {
		t.Errorf("cold and user: %d admitted of %d, far under their limits", admitted, n)
	}
	// Each request is decided from cold's and its user's allotments: a
	// take per allotment of 50, where without allotments every request
	// would be a call. The takes: each request's two descriptors' worth,
	// and a first take of each of the 5 keys at each server; allow twice
	// that, for allotments that lapse on a stalled machine.
	if most := 2 * (2*n/size + servers2*5); calls > int64(most) {
		t.Errorf("cold and user: %d Redis calls for %d requests, want at most %d: the takes alone", calls, n, most)
	}
}
