package layered_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores"
	"github.com/sluicehq/sluice/stores/layered"
)

// BenchmarkLayered measures the layered store's local paths and what it
// saves against Redis:
//
//   - DenyHit: a key whose denial is cached, serially and from
//     GOMAXPROCS goroutines; the remote denies with a wait of an hour,
//     so every timed decision is a cache hit.
//   - DenyHitBatch: a two-rule batch (a sluice.Stack's) whose first rule's
//     denial is cached, denied without a remote call.
//   - AllotmentSpend: an allotted key under a limit that admits everything
//     (allotments of 1,000 from a memstore), serially and in parallel.
//   - AllotmentSpendBatch: a three-rule batch (a sluice.Stack's, or a
//     sluice-serve request of three descriptors) whose rules are all
//     allotted, decided from the allotments.
//   - HotKey: one key far over its limit (10/s), hammered in parallel,
//     through bare redisstore and through a layered store over it;
//     redis-calls/op says how many decisions needed Redis.
func BenchmarkLayered(b *testing.B) {
	ctx := context.Background()
	b.Run("DenyHit", func(b *testing.B) {
		deny := core.Decision{Limit: 1, RetryAfter: time.Hour, ResetAfter: time.Hour}
		remote := stores.Func(func(context.Context, core.Request) (core.Decision, error) { return deny, nil })
		s := newLayered(b, remote, layered.Config{})
		req := core.Request{Key: "hot", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerHour(1)}}
		s.Apply(ctx, req)
		check := func(d core.Decision) {
			if d.Source != core.SourceCache {
				b.Fatalf("decision from %v, want the cache", d.Source)
			}
		}
		b.Run("serial", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				d, _ := s.Apply(ctx, req)
				check(d)
			}
		})
		b.Run("parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					d, _ := s.Apply(ctx, req)
					check(d)
				}
			})
		})
	})
	b.Run("DenyHitBatch", func(b *testing.B) {
		// A two-rule batch whose first rule's denial is cached: denied
		// locally, the other rule reported unknown.
		deny := core.Decision{Limit: 1, RetryAfter: time.Hour, ResetAfter: time.Hour}
		remote := stores.Func(func(context.Context, core.Request) (core.Decision, error) { return deny, nil })
		s := newLayered(b, remote, layered.Config{})
		reqs := []core.Request{
			{Key: "hot", Cost: 1, Terms: &core.Terms{Algorithm: core.Named(algorithms.TokenBucket, "user"), Limit: core.PerHour(1)}},
			{Key: "all", Cost: 1, Terms: &core.Terms{Algorithm: core.Named(algorithms.FixedWindow, "global"), Limit: core.PerHour(1000)}},
		}
		s.Apply(ctx, reqs[0])
		out := make([]core.Decision, len(reqs))
		b.ReportAllocs()
		for b.Loop() {
			if err := s.ApplyAll(ctx, reqs, out); err != nil || out[0].Source != core.SourceCache {
				b.Fatalf("decision %+v, %v; want the cache's", out[0], err)
			}
		}
	})
	b.Run("AllotmentSpendBatch", func(b *testing.B) {
		limit := core.PerSecond(1_000_000_000)
		reqs := []core.Request{
			{Key: "user", Cost: 1, Terms: &core.Terms{Algorithm: core.Named(algorithms.GCRA, "user"), Limit: limit}},
			{Key: "tenant", Cost: 1, Terms: &core.Terms{Algorithm: core.Named(algorithms.GCRA, "tenant"), Limit: limit}},
			{Key: "path", Cost: 1, Terms: &core.Terms{Algorithm: core.Named(algorithms.TokenBucket, "path"), Limit: limit}},
		}
		remote, calls := counted(newMem(b, nil))
		s := newLayered(b, remote, layered.Config{Allot: fixed(1000)})
		out := make([]core.Decision, len(reqs))
		b.ReportAllocs()
		for b.Loop() {
			if err := s.ApplyAll(ctx, reqs, out); err != nil || out[0].Source != core.SourceAllotment {
				b.Fatalf("decision %+v, %v; want from the allotment", out[0], err)
			}
		}
		b.ReportMetric(float64(calls.Load())/float64(b.N), "remote-calls/op")
	})
	b.Run("AllotmentSpend", func(b *testing.B) {
		req := core.Request{Key: "hot", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.GCRA, Limit: core.PerSecond(1_000_000_000)}}
		run := func(b *testing.B, loop func(func())) {
			remote, calls := counted(newMem(b, nil))
			s := newLayered(b, remote, layered.Config{Allot: fixed(1000)})
			b.ReportAllocs()
			loop(func() {
				if d, _ := s.Apply(ctx, req); !d.Allowed {
					b.Fatal("denied")
				}
			})
			b.ReportMetric(float64(calls.Load())/float64(b.N), "remote-calls/op")
		}
		b.Run("serial", func(b *testing.B) {
			run(b, func(f func()) {
				for b.Loop() {
					f()
				}
			})
		})
		b.Run("parallel", func(b *testing.B) {
			run(b, func(f func()) {
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						f()
					}
				})
			})
		})
	})
	b.Run("HotKey", func(b *testing.B) {
		client := newGoRedis(b, redistest.Shared(b).Addr())
		limit := core.PerSecond(10)
		for _, tc := range []struct {
			name string
			wrap func(core.Store) core.Store
		}{
			{"redisstore", func(s core.Store) core.Store { return s }},
			{"layered", func(s core.Store) core.Store { return newLayered(b, s, layered.Config{}) }},
			{"layered-allotment", func(s core.Store) core.Store { return newLayered(b, s, layered.Config{Allot: fixed(5)}) }},
		} {
			b.Run(tc.name, func(b *testing.B) {
				remote, calls := counted(redisRemote(b, client))
				s := tc.wrap(remote)
				req := core.Request{Key: "hot", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: limit}}
				for range 20 { // use up the burst
					s.Apply(ctx, req)
				}
				calls.Store(0)
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := s.Apply(ctx, req); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(calls.Load())/float64(b.N), "redis-calls/op")
			})
		}
	})
}
