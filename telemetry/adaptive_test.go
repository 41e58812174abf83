package telemetry_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/telemetry"
)

// TestAdaptive drives an AIMD controller through a healthy interval and a
// slow one: each change is counted by reason and traced as a span with
// one event holding the old and new limits, and the gauge reads the
// current limit in requests per second.
func TestAdaptive(t *testing.T) {
	h := newProviders(t)
	obs, err := telemetry.NewAdaptive(telemetry.WithTracerProvider(h.tp), telemetry.WithMeterProvider(h.mp), telemetry.WithName("payments"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { obs.Close() })
	law := adaptive.AIMD(adaptive.LatencyAbove(0.99, 50*time.Millisecond), adaptive.Increase(10))
	ctrl, err := adaptive.New(core.PerSecond(100), law, adaptive.WithOnChange(obs.OnChange))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctrl.Close() })
	if err := obs.Watch(ctrl); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, latency := range []time.Duration{20 * time.Millisecond, 80 * time.Millisecond} {
		for range 30 {
			ctrl.Report(latency, adaptive.OK)
		}
		ctrl.Update(ctx)
	}
	// 100 -> 110 (healthy) -> 99 (latency)
	spans := h.ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want one per change (2)", len(spans))
	}
	for i, want := range []map[attribute.Key]string{
		{telemetry.PreviousRateKey: core.PerSecond(100).String(), telemetry.RateKey: core.PerSecond(110).String(), telemetry.AdaptReasonKey: "healthy"},
		{telemetry.PreviousRateKey: core.PerSecond(110).String(), telemetry.RateKey: ctrl.Limit().String(), telemetry.AdaptReasonKey: "latency"},
	} {
		s := spans[i]
		if s.Name() != telemetry.AdaptSpanName || len(s.Events()) != 1 || s.Events()[0].Name != telemetry.LimitChangedEventName {
			t.Fatalf("span %d: %s with events %v, want %s with one %s", i, s.Name(), s.Events(), telemetry.AdaptSpanName, telemetry.LimitChangedEventName)
		}
		got := map[attribute.Key]string{}
		for _, kv := range s.Events()[0].Attributes {
			got[kv.Key] = kv.Value.String()
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("span %d: %s = %q, want %q", i, k, got[k], v)
			}
		}
		if got[telemetry.AdaptLocalKey] != "false" {
			t.Errorf("span %d: %s = %q, want false", i, telemetry.AdaptLocalKey, got[telemetry.AdaptLocalKey])
		}
	}
	ms := h.collect(t)
	name := telemetry.LimiterKey.String("payments")
	if got, want := value(t, ms, "ratelimit.adaptive.limit", name), float64(ctrl.Limit().Rate()); got != want || want >= 110 {
		t.Errorf("ratelimit.adaptive.limit = %v, want the limit after the cut, %v", got, want)
	}
	for reason, want := range map[string]float64{"healthy": 1, "latency": 1} {
		if got := value(t, ms, "ratelimit.adaptive.changes", name, telemetry.AdaptReasonKey.String(reason)); got != want {
			t.Errorf("ratelimit.adaptive.changes{%s} = %v, want %v", reason, got, want)
		}
	}
}
