package telemetry_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores/memstore"
	"github.com/sluicehq/sluice/telemetry"
)

// discard is a span exporter that drops what it is given, so that a
// benchmark measures the SDK's recording and batching, not an exporter's
// output or an ever-growing in-memory list.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// benchKeys are the keys benchmarks cycle through: enough to keep the
// memory store's shards apart under parallel load, few enough to stay
// warm in its tables.
var benchKeys = func() []string {
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	return keys
}()

// BenchmarkTelemetry measures a decision (Limiter.Allow, token bucket)
// bare and through the decorator, serial and parallel, on two stores:
// memstore, and a store that answers a fixed decision at once, which
// leaves the decorator's own cost alone in the figure. The providers:
//
//   - bare: no decorator;
//   - noop: the API's no-op providers;
//   - global: the global providers before an SDK is installed (the
//     default of a program that never installs one);
//   - sdk-metrics: the SDK's meter (a manual reader), no-op tracing;
//   - sdk-unsampled: the SDK's meter and tracer, sampling nothing;
//   - sdk: both recording everything (always sampled, batched to an
//     exporter that drops the spans), the key hashed.
//
// Compare the providers with: benchstat -col /provider.
func BenchmarkTelemetry(b *testing.B) {
	providers := []struct {
		name string
		opts func(b *testing.B) []telemetry.Option // nil: no decorator
	}{
		{"bare", nil},
		{"noop", func(*testing.B) []telemetry.Option {
			return []telemetry.Option{
				telemetry.WithTracerProvider(tracenoop.NewTracerProvider()),
				telemetry.WithMeterProvider(metricnoop.NewMeterProvider()),
			}
		}},
		{"global", func(*testing.B) []telemetry.Option { return nil }},
		{"sdk-metrics", func(b *testing.B) []telemetry.Option {
			return []telemetry.Option{
				telemetry.WithTracerProvider(tracenoop.NewTracerProvider()),
				telemetry.WithMeterProvider(benchMeterProvider(b)),
			}
		}},
		{"sdk-unsampled", func(b *testing.B) []telemetry.Option {
			return []telemetry.Option{
				telemetry.WithTracerProvider(benchTracerProvider(b, sdktrace.NeverSample())),
				telemetry.WithMeterProvider(benchMeterProvider(b)),
			}
		}},
		{"sdk", func(b *testing.B) []telemetry.Option {
			return []telemetry.Option{
				telemetry.WithTracerProvider(benchTracerProvider(b, sdktrace.AlwaysSample())),
				telemetry.WithMeterProvider(benchMeterProvider(b)),
				telemetry.WithKeyHash([]byte("0123456789abcdef0123456789abcdef")),
			}
		}},
	}
	fixed := core.StoreFunc(func(context.Context, core.Request) (core.Decision, error) {
		return core.Decision{Allowed: true, Limit: 1_000_000, Remaining: 999_999}, nil
	})
	for _, backend := range []string{"memstore", "fixed"} {
		for _, mode := range []string{"serial", "parallel"} {
			for _, p := range providers {
				b.Run("store="+backend+"/mode="+mode+"/provider="+p.name, func(b *testing.B) {
					var store core.Store = fixed
					if backend == "memstore" {
						mem, err := memstore.New(memstore.Config{})
						if err != nil {
							b.Fatal(err)
						}
						b.Cleanup(func() { mem.Close() })
						store = mem
					}
					if p.opts != nil {
						var err error
						if store, err = telemetry.New(store, append(p.opts(b), telemetry.WithName("bench"))...); err != nil {
							b.Fatal(err)
						}
					}
					benchDecisions(b, store, mode == "parallel")
				})
			}
		}
	}
}

func benchDecisions(b *testing.B, store core.Store, parallel bool) {
	lim, err := core.NewLimiter(store, algorithms.TokenBucket, core.PerSecond(1_000_000_000))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, k := range benchKeys {
		if _, err := lim.Allow(ctx, k); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	if !parallel {
		for i := 0; b.Loop(); i++ {
			lim.Allow(ctx, benchKeys[i%len(benchKeys)])
		}
		return
	}
	var next atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(97))
		for pb.Next() {
			lim.Allow(ctx, benchKeys[i%len(benchKeys)])
			i++
		}
	})
}

func benchTracerProvider(b *testing.B, sampler sdktrace.Sampler) *sdktrace.TracerProvider {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithBatcher(discard{}))
	b.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tp
}

func benchMeterProvider(b *testing.B) *sdkmetric.MeterProvider {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() { mp.Shutdown(context.Background()) })
	return mp
}
