package telemetry_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/memstore"
	"github.com/sluicehq/sluice/telemetry"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// harness is a decorator with SDK providers whose spans and metrics a test
// reads.
type harness struct {
	store  *telemetry.Store
	tp     *sdktrace.TracerProvider
	mp     *sdkmetric.MeterProvider
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
}

// newHarness wraps inner in a decorator recording into an in-memory span
// recorder and a manual metric reader, and closes it when the test ends.
// nearAt returns inner under a policy that marks admissions leaving less
// than fraction of their limit near it, which the decorator counts.
func nearAt(t testing.TB, inner core.Store, fraction float64) core.Store {
	t.Helper()
	p, err := policy.New(inner, policy.WithNearLimit(fraction, nil))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newHarness(t testing.TB, inner core.Store, opts ...telemetry.Option) *harness {
	t.Helper()
	h := newProviders(t)
	h.wrap(t, inner, opts...)
	return h
}

// newProviders returns a harness with its providers but no decorator yet.
func newProviders(t testing.TB) *harness {
	t.Helper()
	h := &harness{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	h.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(h.spans))
	h.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(h.reader))
	t.Cleanup(func() {
		h.tp.Shutdown(context.Background())
		h.mp.Shutdown(context.Background())
	})
	return h
}

// wrap makes the harness's decorator around inner. It starts a span
// for every decision (WithRootSpans), so that a test's decisions, made
// outside any trace, are traced; TestSpanRule checks the default.
func (h *harness) wrap(t testing.TB, inner core.Store, opts ...telemetry.Option) {
	t.Helper()
	opts = append([]telemetry.Option{telemetry.WithTracerProvider(h.tp), telemetry.WithMeterProvider(h.mp), telemetry.WithRootSpans()}, opts...)
	s, err := telemetry.New(inner, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	h.store = s
}

// newMem returns a memory store closed when the test ends.
func newMem(t testing.TB) *memstore.Store {
	t.Helper()
	m, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// ended returns the spans that have ended, and forgets them.
func (h *harness) ended() []sdktrace.ReadOnlySpan {
	s := h.spans.Ended()
	h.spans.Reset()
	return s
}

// onlySpan returns the one span that has ended since the last call.
func (h *harness) onlySpan(t testing.TB) sdktrace.ReadOnlySpan {
	t.Helper()
	spans := h.ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans ended, want 1", len(spans))
	}
	return spans[0]
}

// collect returns the metrics recorded so far, by instrument name.
func (h *harness) collect(t testing.TB) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	out := make(map[string]metricdata.Metrics)
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != telemetry.ScopeName || sm.Scope.Version != telemetry.Version {
			t.Errorf("scope %s %s, want %s %s", sm.Scope.Name, sm.Scope.Version, telemetry.ScopeName, telemetry.Version)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// point is one data point of any kind: its attributes and its value (the
// count, for a histogram).
type point struct {
	attrs attribute.Set
	value float64
	// exemplars' filtered attributes, for the privacy scan
	exemplarAttrs [][]attribute.KeyValue
}

// points returns the data points of m.
func points(t testing.TB, m metricdata.Metrics) []point {
	t.Helper()
	var out []point
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			out = append(out, point{p.Attributes, float64(p.Value), exemplarAttrs(p.Exemplars)})
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			out = append(out, point{p.Attributes, float64(p.Value), exemplarAttrs(p.Exemplars)})
		}
	case metricdata.Gauge[float64]:
		for _, p := range d.DataPoints {
			out = append(out, point{p.Attributes, p.Value, exemplarAttrs(p.Exemplars)})
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			out = append(out, point{p.Attributes, float64(p.Count), exemplarAttrs(p.Exemplars)})
		}
	default:
		t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
	}
	return out
}

func exemplarAttrs[N int64 | float64](es []metricdata.Exemplar[N]) [][]attribute.KeyValue {
	var out [][]attribute.KeyValue
	for _, e := range es {
		out = append(out, e.FilteredAttributes)
	}
	return out
}

// value returns the value of m's data point whose attributes include every
// one of want (the count for a histogram), and 0 if there is none. It
// fails the test if several points match.
func value(t testing.TB, ms map[string]metricdata.Metrics, name string, want ...attribute.KeyValue) float64 {
	t.Helper()
	m, ok := ms[name]
	if !ok {
		return 0
	}
	var found []point
	for _, p := range points(t, m) {
		if hasAll(p.attrs, want) {
			found = append(found, p)
		}
	}
	switch len(found) {
	case 0:
		return 0
	case 1:
		return found[0].value
	}
	t.Fatalf("%s: %d points match %v", name, len(found), want)
	return 0
}

func hasAll(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// attrs returns a span's attributes by key, failing on a repeated key.
func attrs(t testing.TB, s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	t.Helper()
	out := make(map[attribute.Key]attribute.Value)
	for _, kv := range s.Attributes() {
		if _, dup := out[kv.Key]; dup {
			t.Errorf("span %s: attribute %s twice", s.Name(), kv.Key)
		}
		out[kv.Key] = kv.Value
	}
	return out
}

// checkAttrs compares a span's attributes with want exactly: no attribute
// missing, none extra.
func checkAttrs(t testing.TB, what string, s sdktrace.ReadOnlySpan, want map[attribute.Key]attribute.Value) {
	t.Helper()
	got := attrs(t, s)
	var diffs []string
	for k, w := range want {
		if g, ok := got[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s missing, want %s", k, w.String()))
		} else if g != w {
			diffs = append(diffs, fmt.Sprintf("%s = %s, want %s", k, g.String(), w.String()))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s = %s, not expected", k, g.String()))
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 0 {
		t.Errorf("%s: span attributes:\n\t%s", what, strings.Join(diffs, "\n\t"))
	}
}

// kvs turns attributes into the map checkAttrs takes.
func kvs(list ...attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value, len(list))
	for _, kv := range list {
		m[kv.Key] = kv.Value
	}
	return m
}
