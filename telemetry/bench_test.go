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

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores"
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
//   - sdk-unsampled: the SDK's meter and tracer, sampling nothing, the
//     decisions made outside a trace (so, by default, with no span);
//   - sdk-root-unsampled: the same with WithRootSpans, so that each
//     decision starts a root span its sampler drops;
//   - sdk: both recording everything (WithRootSpans, always sampled,
//     batched to an exporter that drops the spans), the key hashed.
//
// Compare the providers with: benchstat -col /provider.
func BenchmarkTelemetry(b *testing.B) {
	fixed := stores.Func(func(context.Context, core.Request) (core.Decision, error) {
		return core.Decision{Allowed: true, Limit: 1_000_000, Remaining: 999_999}, nil
	})
	for _, backend := range []string{"memstore", "fixed"} {
		for _, mode := range []string{"serial", "parallel"} {
			for _, p := range benchProviders {
				b.Run("store="+backend+"/mode="+mode+"/provider="+p.name, func(b *testing.B) {
					var store core.Store = fixed
					if backend == "memstore" {
						store = benchMem(b)
					}
					benchDecisions(b, p.wrap(b, store), mode == "parallel")
				})
			}
		}
	}
}

// benchProvider is a way of providing the decorator's tracer and meter.
type benchProvider struct {
	name string
	opts func(b *testing.B) []telemetry.Option // nil: no decorator
}

// benchProviders are the providers BenchmarkTelemetry and
// BenchmarkApplyAll compare; see BenchmarkTelemetry.
var benchProviders = []benchProvider{
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
	{"sdk-root-unsampled", func(b *testing.B) []telemetry.Option {
		return []telemetry.Option{
			telemetry.WithTracerProvider(benchTracerProvider(b, sdktrace.NeverSample())),
			telemetry.WithMeterProvider(benchMeterProvider(b)),
			telemetry.WithRootSpans(),
		}
	}},
	{"sdk", func(b *testing.B) []telemetry.Option {
		return []telemetry.Option{
			telemetry.WithRootSpans(),
			telemetry.WithTracerProvider(benchTracerProvider(b, sdktrace.AlwaysSample())),
			telemetry.WithMeterProvider(benchMeterProvider(b)),
			telemetry.WithKeyHash([]byte("0123456789abcdef0123456789abcdef")),
		}
	}},
}

// benchMem returns a memory store closed when the benchmark ends.
func benchMem(b *testing.B) *memstore.Store {
	mem, err := memstore.New(memstore.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { mem.Close() })
	return mem
}

// fixedStore answers every request at once with a fixed admission, batches
// included, so that a benchmark over it measures only what is in front.
type fixedStore struct{}

func (fixedStore) Apply(context.Context, core.Request) (core.Decision, error) {
	return core.Decision{Allowed: true, Limit: 1_000_000, Remaining: 999_999}, nil
}

func (fixedStore) ApplyAll(_ context.Context, reqs []core.Request, out []core.Decision) error {
	for i := range reqs {
		out[i] = core.Decision{Allowed: true, Limit: 1_000_000, Remaining: 999_999 - int64(i)}
	}
	return nil
}

func (fixedStore) Reset(context.Context, string, core.Algorithm) error { return nil }
func (fixedStore) Close() error                                        { return nil }

// BenchmarkApplyAll measures a batch of three rules (a token bucket per
// user, a GCRA per tenant and a fixed window for everyone, as a Stack of
// three rules sends them) decided with ApplyAll, bare and through the
// decorator under the providers of BenchmarkTelemetry, on memstore and on
// a store that answers at once. It calls ApplyAll directly, with slices
// made once, so that allocs/op is the store's and the decorator's alone
// (a Stack adds its own request and decision slices).
//
// Compare the providers with: benchstat -col /provider.
func BenchmarkApplyAll(b *testing.B) {
	for _, backend := range []string{"memstore", "fixed"} {
		for _, mode := range []string{"serial", "parallel"} {
			for _, p := range benchProviders {
				b.Run("store="+backend+"/mode="+mode+"/provider="+p.name, func(b *testing.B) {
					var store core.Store = fixedStore{}
					if backend == "memstore" {
						store = benchMem(b)
					}
					benchBatches(b, p.wrap(b, store), mode == "parallel")
				})
			}
		}
	}
}

func benchBatches(b *testing.B, store core.Store, parallel bool) {
	limit := core.PerSecond(1_000_000_000)
	user := core.Named(algorithms.TokenBucket, "user")
	tenant := core.Named(algorithms.GCRA, "tenant")
	global := core.Named(algorithms.FixedWindow, "global")
	batch := func(i int) []core.Request {
		return []core.Request{
			{Key: benchKeys[i%len(benchKeys)], Cost: 1, Terms: &core.Terms{Algorithm: user, Limit: limit}},
			{Key: benchKeys[i%len(benchKeys)/16], Cost: 1, Terms: &core.Terms{Algorithm: tenant, Limit: limit}},
			{Key: "all", Cost: 1, Terms: &core.Terms{Algorithm: global, Limit: limit}},
		}
	}
	batches := make([][]core.Request, len(benchKeys))
	ctx := context.Background()
	out := make([]core.Decision, 3)
	for i := range batches {
		batches[i] = batch(i)
		if err := store.ApplyAll(ctx, batches[i], out); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	if !parallel {
		for i := 0; b.Loop(); i++ {
			store.ApplyAll(ctx, batches[i%len(batches)], out)
		}
		return
	}
	var next atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(97))
		out := make([]core.Decision, 3)
		for pb.Next() {
			store.ApplyAll(ctx, batches[i%len(batches)], out)
			i++
		}
	})
}

func benchDecisions(b *testing.B, store core.Store, parallel bool) {
	lim, err := sluice.NewLimiter(store, algorithms.TokenBucket, core.PerSecond(1_000_000_000))
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

// wrap returns store in the provider's decorator, or bare.
func (p benchProvider) wrap(b *testing.B, store core.Store) core.Store {
	if p.opts == nil {
		return store
	}
	s, err := telemetry.New(store, append(p.opts(b), telemetry.WithName("bench"))...)
	if err != nil {
		b.Fatal(err)
	}
	return s
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
