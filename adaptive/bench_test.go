package adaptive_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/policy"
)

// BenchmarkReport measures reporting one call: the target is at most
// 50 ns and no allocation, serially and from parallel goroutines.
func BenchmarkReport(b *testing.B) {
	ctrl, err := adaptive.New(core.PerSecond(100), adaptive.Gradient())
	if err != nil {
		b.Fatal(err)
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			ctrl.Report(time.Duration(i&0xffff)*time.Microsecond, adaptive.OK)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				ctrl.Report(time.Duration(i&0xffff)*time.Microsecond, adaptive.OK)
				i++
			}
		})
	})
}

// BenchmarkDecision compares Limiter.Allow on memstore, one hot key, under
// a fixed limit ("fixed"), through a policy without an override
// ("policy"), through an override returning a constant ("constant"), and
// through policy.WithOverride(ctrl.Override) ("adaptive"), and with the
// limiter following the controller (sluice.Limiter.Following, "following"):
// the target is an adaptive decision within 1.1× of a fixed one.
func BenchmarkDecision(b *testing.B) {
	ctrl, err := adaptive.New(core.PerSecond(1_000_000_000), adaptive.AIMD(), adaptive.WithBounds(1, 1_000_000_000))
	if err != nil {
		b.Fatal(err)
	}
	limit := core.PerSecond(1_000_000_000)
	for _, c := range []struct {
		name string
		wrap func(core.Store) (core.Store, error)
	}{
		{"fixed", func(s core.Store) (core.Store, error) { return s, nil }},
		{"policy", func(s core.Store) (core.Store, error) { return policy.New(s) }},
		{"constant", func(s core.Store) (core.Store, error) {
			return policy.New(s, policy.WithOverride(func(core.Request) core.Limit { return limit }))
		}},
		{"adaptive", func(s core.Store) (core.Store, error) { return policy.New(s, policy.WithOverride(ctrl.Override)) }},
		{"following", func(s core.Store) (core.Store, error) { return s, nil }},
	} {
		b.Run(c.name, func(b *testing.B) {
			store, err := c.wrap(newMemstore(b))
			if err != nil {
				b.Fatal(err)
			}
			lim, err := sluice.NewLimiter(store, algorithms.TokenBucket, limit)
			if err != nil {
				b.Fatal(err)
			}
			if c.name == "following" {
				// The limiter reads the controller's limit itself: no
				// policy in the way (sluice.Limiter.Following).
				if lim, err = lim.Following(ctrl); err != nil {
					b.Fatal(err)
				}
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				lim.Allow(ctx, "hot")
			}
		})
	}
}

// BenchmarkUpdate measures one interval's update with no shared store.
func BenchmarkUpdate(b *testing.B) {
	ctrl, err := adaptive.New(core.PerSecond(100), adaptive.Gradient(), adaptive.WithBounds(1, 1000))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		ctrl.Report(20*time.Millisecond, adaptive.OK)
		ctrl.Update(ctx)
	}
}

var sinkLimit core.Limit

// BenchmarkOverride measures the override alone: the controller's
// against a function returning a constant limit.
func BenchmarkOverride(b *testing.B) {
	ctrl, _ := adaptive.New(core.PerSecond(100), adaptive.AIMD())
	limit := core.PerSecond(100)
	req := core.Request{Key: "hot", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: limit}}
	for _, c := range []struct {
		name string
		f    func(core.Request) core.Limit
	}{{"constant", func(core.Request) core.Limit { return limit }}, {"ctrl", ctrl.Override}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				sinkLimit = c.f(req)
			}
		})
	}
}
