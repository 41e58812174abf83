package benchmarks

import (
	"context"
	"testing"
	"time"

	limiterstore "github.com/sethvargo/go-limiter/memorystore"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/stores/memstore"
)

// BenchmarkDirect calls sluice's memstore through sluice.Limiter and
// sethvargo/go-limiter's memory store through its Take, serially on one
// hot key under BenchmarkMemory's limit (so both deny), with nothing of
// BenchmarkMemory's loop around them: each library's own cost of a
// decision. Beside ns/op each reports the process's CPU time per
// decision (cpu-ns/op). stores/memstore's BenchmarkContract takes sluice's
// apart.
//
//	go test -run '^$' -bench BenchmarkDirect -count 6 .
func BenchmarkDirect(b *testing.B) {
	ctx := context.Background()
	b.Run(NameMemStore, func(b *testing.B) {
		store, err := memstore.New(memstore.Config{MaxKeys: memoryBoundedKeys})
		if err != nil {
			b.Fatal(err)
		}
		defer store.Close()
		lim, err := sluice.NewLimiter(store, algorithms.TokenBucket, sluice.PerSecond(int64(memoryLimit.Rate)).WithBurst(int64(memoryLimit.Burst)))
		if err != nil {
			b.Fatal(err)
		}
		for range 2 * memoryLimit.Burst {
			lim.Allow(ctx, "hot")
		}
		b.ReportAllocs()
		defer reportCPU(b)()
		for b.Loop() {
			lim.Allow(ctx, "hot")
		}
	})
	b.Run(NameGoLimiter, func(b *testing.B) {
		store, err := limiterstore.New(&limiterstore.Config{Tokens: uint64(memoryLimit.Rate), Interval: time.Second})
		if err != nil {
			b.Fatal(err)
		}
		defer store.Close(ctx)
		for range 2 * memoryLimit.Burst {
			store.Take(ctx, "hot")
		}
		b.ReportAllocs()
		defer reportCPU(b)()
		for b.Loop() {
			store.Take(ctx, "hot")
		}
	})
}

// reportCPU reads the process's CPU time and returns a function that
// reports the CPU time since, per iteration of b, as cpu-ns/op.
func reportCPU(b *testing.B) func() {
	before := processCPU(b)
	return func() { b.ReportMetric(1e3*(processCPU(b)-before)/float64(b.N), "cpu-ns/op") }
}
