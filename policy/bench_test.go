package policy

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores"
	"github.com/sluicehq/sluice/stores/memstore"
)

// BenchmarkBreaker measures what the breaker adds to a decision: closed
// over an in-process store (the per-call deadline, the goroutine that
// bounds the call, gobreaker's accounting), and open in each mode (no
// store call).
func BenchmarkBreaker(b *testing.B) {
	mem, err := memstore.New(memstore.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { mem.Close() })
	r := core.Request{Key: "k", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(1 << 30)}}
	ctx := context.Background()
	run := func(b *testing.B, s core.Store) {
		b.Run("serial", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Apply(ctx, r); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := s.Apply(ctx, r); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
	b.Run("memstore", func(b *testing.B) { run(b, mem) })
	b.Run("closed", func(b *testing.B) {
		br, err := NewBreaker(mem)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { br.Close() }) // its stall meter ends with it; mem's Close is idempotent
		run(b, br)
	})
	down := stores.Func(func(context.Context, core.Request) (core.Decision, error) { return core.Decision{}, refused })
	for _, mode := range []Mode{FailOpen, FailClosed, Degrade} {
		b.Run("open/"+mode.String(), func(b *testing.B) {
			br, err := NewBreaker(down, WithMode(mode), WithInstances(4), WithOpenTimeout(time.Hour), withLocal(b))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { br.Close() })
			settled(br)
			for range 10 {
				br.Apply(ctx, r)
			}
			if br.State() != Open {
				b.Fatalf("state %v, want open", br.State())
			}
			run(b, br)
		})
	}
}
