package serve

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/serve/limits"
	"github.com/sluicehq/sluice/stores/layered"
	"github.com/sluicehq/sluice/stores/memstore"
)

// benchLimits is rlsload's configuration (rlsload -print-config) with
// limits no run reaches: every request is admitted and charged.
const benchLimits = `
domain: bench
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 1000000000
    descriptors:
      - key: path
        rate_limit:
          unit: minute
          requests_per_unit: 2000000000
  - key: tenant
    rate_limit:
      unit: minute
      requests_per_unit: 4000000000
`

// BenchmarkShouldRateLimit measures the service's decision, without
// gRPC: the request as Envoy's RLS filter sends it, one descriptor
// ([{user=U}]) or three ([{user=U}] [{tenant=T}] [{user=U}, {path=/api}],
// as rlsload sends them), for 10,000 users and 16 tenants, at 64
// goroutines, on memstore and on each Redis store behind the chain
// sluice-serve runs (telemetry with no-op providers, a fail-open
// breaker), and with every rule allotted (rueidis-allotments).
func BenchmarkShouldRateLimit(b *testing.B) {
	set, err := limits.Parse(limits.Options{}, limits.File{Name: "bench.yaml", Data: []byte(benchLimits)})
	if err != nil {
		b.Fatal(err)
	}
	allotted, err := limits.Parse(limits.Options{Allotment: 100}, limits.File{Name: "bench.yaml", Data: []byte(benchLimits)})
	if err != nil {
		b.Fatal(err)
	}
	type store struct {
		name string
		open func(b *testing.B) core.Store
		set  *limits.Set
	}
	stores := []store{
		{"memstore", func(b *testing.B) core.Store {
			s, err := memstore.New(memstore.Config{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			return s
		}, set},
	}
	for _, c := range clients {
		stores = append(stores, store{c.name, func(b *testing.B) core.Store {
			prefix := "bench:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
			return chain(b, c.open(b, redistest.Shared(b).Addr(), prefix), policy.FailOpen, 100*time.Millisecond)
		}, set})
	}
	// Allotments, as sluice-serve -allot-all 100 takes them: every rule
	// takes allotments of up to 100 from rueidis, through the layered
	// store below the breaker; a request is decided from the allotments,
	// with a Redis call only when one runs out.
	stores = append(stores, store{"rueidis-allotments", func(b *testing.B) core.Store {
		prefix := "bench:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
		l, err := layered.New(clients[0].open(b, redistest.Shared(b).Addr(), prefix), layered.Config{
			Allot:              func(req core.Request) int64 { return limits.AllotmentOf(req.Algorithm) },
			WindowAllotmentTTL: time.Minute,
		})
		if err != nil {
			b.Fatal(err)
		}
		return chain(b, l, policy.FailOpen, 100*time.Millisecond)
	}, allotted})
	// The requests, made before: a request is read, never written, by
	// the service.
	reqs := map[int][]*rlsv3.RateLimitRequest{}
	for _, n := range []int{1, 3} {
		for i := range 10_000 {
			user := "u" + strconv.Itoa(i)
			req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user=" + user)}}
			if n == 3 {
				req.Descriptors = append(req.Descriptors, desc("tenant=t"+strconv.Itoa(i%16)), desc("user="+user, "path=/api"))
			}
			reqs[n] = append(reqs[n], req)
		}
	}
	for _, st := range stores {
		for _, n := range []int{1, 3} {
			b.Run(fmt.Sprintf("%s/descriptors=%d", st.name, n), func(b *testing.B) {
				svc, err := NewService(st.open(b), st.set)
				if err != nil {
					b.Fatal(err)
				}
				var next atomic.Uint64
				ctx := context.Background()
				b.ReportAllocs()
				b.SetParallelism(32) // 64 goroutines on 2 cores
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						req := reqs[n][next.Add(1)%uint64(len(reqs[n]))]
						resp, err := svc.ShouldRateLimit(ctx, req)
						if err != nil {
							b.Error(err)
							return
						}
						if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit == nil {
							// Not decided, or decided by the breaker's
							// mode (fail-open: no current limit).
							b.Errorf("answered %v, %v", resp.OverallCode, resp.Statuses[0])
							return
						}
					}
				})
			})
		}
	}
}
