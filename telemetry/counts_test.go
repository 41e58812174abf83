package telemetry_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/telemetry"
)

// decide makes n admitted decisions through s, on keys of their own.
func decide(t *testing.T, s core.Store, n int) {
	t.Helper()
	for i := range n {
		req := core.Request{Key: "user:" + string(rune('a'+i)), Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(10)}}
		if d, err := s.Apply(context.Background(), req); err != nil || !d.Allowed {
			t.Fatalf("decision %d: %+v, %v", i, d, err)
		}
	}
}

// allowed reads the allowed decisions of limiter name from ms.
func allowed(t *testing.T, ms map[string]metricdata.Metrics, name string) float64 {
	t.Helper()
	return value(t, ms, "ratelimit.decisions", telemetry.LimiterKey.String(name), telemetry.ResultKey.String(telemetry.ResultAllowed))
}

// TestDecisionsDelta checks ratelimit.decisions under a reader that asks
// for deltas: each collection reports the decisions made since the last,
// though the decorator reports its totals.
func TestDecisionsDelta(t *testing.T) {
	reader := sdkmetric.NewManualReader(sdkmetric.WithTemporalitySelector(func(sdkmetric.InstrumentKind) metricdata.Temporality {
		return metricdata.DeltaTemporality
	}))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	s, err := telemetry.New(newMem(t), telemetry.WithName("delta"), telemetry.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	h := &harness{reader: reader}
	decide(t, s, 3)
	if got := allowed(t, h.collect(t), "delta"); got != 3 {
		t.Errorf("first collection: %v decisions, want 3", got)
	}
	decide(t, s, 2)
	if got := allowed(t, h.collect(t), "delta"); got != 2 {
		t.Errorf("second collection: %v decisions, want the 2 made since the first", got)
	}
}

// TestDecisionsOfClosedDecorators checks what docs/telemetry.md says of
// ratelimit.decisions when decorators share their attributes: their counts
// add up, and a decorator's leave the export when it is closed, as its
// callback is unregistered.
func TestDecisionsOfClosedDecorators(t *testing.T) {
	h := newProviders(t)
	h.wrap(t, newMem(t), telemetry.WithName("shared"))
	first := h.store
	h.wrap(t, newMem(t), telemetry.WithName("shared"))
	second := h.store
	decide(t, first, 2)
	decide(t, second, 3)
	if got := allowed(t, h.collect(t), "shared"); got != 5 {
		t.Errorf("two decorators: %v decisions, want 2 + 3", got)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if got := allowed(t, h.collect(t), "shared"); got != 3 {
		t.Errorf("after the first's Close: %v decisions, want the second's 3", got)
	}
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	if got := allowed(t, h.collect(t), "shared"); got != 0 {
		t.Errorf("after both Close: %v decisions, want none reported", got)
	}
}

// TestDecisionsCollectedWhileCounting collects ratelimit.decisions again
// and again while goroutines decide under new algorithm names, for the
// race detector (make test runs it with -race), and checks that every
// decision is reported once they are done.
func TestDecisionsCollectedWhileCounting(t *testing.T) {
	h := newProviders(t)
	h.wrap(t, newMem(t), telemetry.WithName("busy"))
	const goroutines, per = 4, 300
	stop := make(chan struct{})
	collected := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				collected <- n
				return
			default:
				var rm metricdata.ResourceMetrics
				if err := h.reader.Collect(context.Background(), &rm); err != nil {
					t.Error(err)
				}
				n++
			}
		}
	}()
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range per {
				alg := core.Named(algorithms.TokenBucket, fmt.Sprintf("rule-%d", (g*per+i)%20))
				req := core.Request{Key: fmt.Sprintf("user:%d", i), Cost: 1, Terms: &core.Terms{Algorithm: alg, Limit: core.PerSecond(1e6)}}
				if _, err := h.store.Apply(context.Background(), req); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	if n := <-collected; n == 0 {
		t.Log("no collection overlapped the decisions") // the final one below still checks the counts
	}
	var total float64
	for _, p := range points(t, h.collect(t)["ratelimit.decisions"]) {
		total += p.value
	}
	if total != goroutines*per {
		t.Errorf("ratelimit.decisions sums to %v, want %d", total, goroutines*per)
	}
}
