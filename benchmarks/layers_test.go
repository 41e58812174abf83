package benchmarks

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores"
)

// BenchmarkLayers takes the production chain apart, layer by layer, over
// each Redis store: the bare store, then layered over it, then the
// breaker over that, then policy, then telemetry (the whole chain, as
// [RedisContenders] builds it), each deciding one hot key from 64
// goroutines, as BenchmarkRedis's hot-key cell does. A layer's cost is
// its row's client-µs/op less the row below it; compare the rows with
// benchstat -col /layers.
//
// On a machine whose two cores the benchmark shares with Redis, with
// other work besides, these figures move by half from run to run;
// BenchmarkLayerCost measures the layers' own CPU alone.
func BenchmarkLayers(b *testing.B) {
	srv := redistest.Shared(b)
	keys := workloads()["hot"]
	stores := []struct {
		name string
		open func(addr, prefix string) (core.Store, func(), error)
	}{
		{"redisstore", redisStore},
		{"rueidisstore", rueidisStore},
	}
	for _, s := range stores {
		for n := range len(ChainLayers) + 1 {
			top := "store"
			if n > 0 {
				top = ChainLayers[n-1]
			}
			name := fmt.Sprintf("layers-%d-%s", n, top)
			c, err := newStore(s.name+"-"+name, s.open, n, nil)(srv.Addr(), redisLimit)
			if err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("store=%s/layers=%d-%s", s.name, n, top), func(b *testing.B) {
				runRedis(b, srv, c, 64, keys.key)
			})
			c.Close()
		}
	}
}

// BenchmarkLayerCost measures the CPU each layer of the production chain
// adds to a decision, alone: the layers of BenchmarkLayers, built the
// same way, over a store that answers every request at once with an
// admission, so that nothing but the layers runs. Decisions come from
// GOMAXPROCS goroutines at once (b.RunParallel), on one key; cpu-ns/op
// is the process's CPU time per decision (getrusage), which is what a
// layer costs a machine however many cores share the work.
func BenchmarkLayerCost(b *testing.B) {
	open := func(string, string) (core.Store, func(), error) {
		return stores.Func(func(context.Context, core.Request) (core.Decision, error) {
			return core.Decision{Allowed: true, Limit: 100, Remaining: 99}, nil
		}), func() {}, nil
	}
	for n := range len(ChainLayers) + 1 {
		top := "store"
		if n > 0 {
			top = ChainLayers[n-1]
		}
		c, err := newStore("fixed", open, n, nil)("", redisLimit)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("layers=%d-%s", n, top), func(b *testing.B) {
			ctx := b.Context()
			before := processCPU(b)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.Allow(ctx, "hot"); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(1e3*(processCPU(b)-before)/float64(b.N), "cpu-ns/op")
		})
		c.Close()
	}
}
