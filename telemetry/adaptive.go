package telemetry

import (
	"context"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/core"
)

// The names of what [Adaptive] records.
const (
	// AdaptSpanName names the span [Adaptive] makes for each change of an
	// adapted limit; it holds one [LimitChangedEventName] event.
	AdaptSpanName = "ratelimit.adapt"
	// LimitChangedEventName names the event of a change of an adapted
	// limit, with the attributes [PreviousRateKey], [RateKey],
	// [AdaptReasonKey] and [AdaptLocalKey].
	LimitChangedEventName = "ratelimit.limit_changed"
)

// The attributes of an adapted limit's change.
const (
	// PreviousRateKey is the limit before a change, as [RateKey]
	// gives the limit after it ("200/s burst 20").
	PreviousRateKey = attribute.Key("ratelimit.rate.previous")
	// AdaptReasonKey is why the limit changed: "hold", "healthy",
	// "latency", "errors", "overload" or "fleet" (adaptive.Reason's
	// names).
	AdaptReasonKey = attribute.Key("ratelimit.adapt.reason")
	// AdaptLocalKey is true when a controller with a shared store went on
	// alone: the new limit is its own, not the fleet's (adaptive.Change's
	// Local).
	AdaptLocalKey = attribute.Key("ratelimit.adapt.local")
)

// Adaptive records an adaptive controller's limit: the gauge
// ratelimit.adaptive.limit (the limit's rate in requests per second),
// the counter ratelimit.adaptive.changes (by reason), and for each change
// a span named [AdaptSpanName] with a [LimitChangedEventName] event. Make
// one with [NewAdaptive], hand its OnChange to the controller, and Watch
// the controller:
//
//	obs, err := telemetry.NewAdaptive(telemetry.WithName("payments"))
//	ctrl, err := adaptive.New(initial, law, adaptive.WithOnChange(obs.OnChange))
//	err = obs.Watch(ctrl)
//	defer obs.Close()
//
// It is safe for concurrent use.
type Adaptive struct {
	tracer  trace.Tracer
	tracing bool
	changes metric.Int64Counter
	gauge   metric.Float64ObservableGauge
	meter   metric.Meter
	base    []attribute.KeyValue
	add     [numReasons][]metric.AddOption // by adaptive.Reason

	mu  sync.Mutex
	reg metric.Registration // the gauge's callback, once watched
	ctl atomic.Pointer[limitSource]
}

// limitSource is what Watch observes.
type limitSource struct{ limit func() core.Limit }

// numReasons is the number of adaptive.Reason values with attribute sets
// of their own, and one for any other, counted as "_OTHER".
const numReasons = int(adaptive.ReasonFleet) + 2

// NewAdaptive returns an observer of an adaptive controller's limit,
// recording through the providers of opts ([WithTracerProvider],
// [WithMeterProvider]) under the limiter name of [WithName]. The key and
// store options do not apply. It fails with [ErrInvalidOption] for an
// option it cannot use.
func NewAdaptive(opts ...Option) (*Adaptive, error) {
	var cfg config
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	a := &Adaptive{}
	if cfg.limiter != "" {
		a.base = append(a.base, LimiterKey.String(cfg.limiter))
	}
	tp := cfg.tp
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	a.tracing = !isNoopTracerProvider(tp)
	a.tracer = tp.Tracer(ScopeName, trace.WithInstrumentationVersion(Version), trace.WithSchemaURL(semconv.SchemaURL))
	mp := cfg.mp
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	a.meter = mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version), metric.WithSchemaURL(semconv.SchemaURL))
	var err error
	a.changes, err = a.meter.Int64Counter("ratelimit.adaptive.changes",
		metric.WithUnit("{change}"),
		metric.WithDescription("Changes of an adapted limit, by reason (ratelimit.adapt.reason)."))
	if err != nil {
		return nil, err
	}
	a.gauge, err = a.meter.Float64ObservableGauge("ratelimit.adaptive.limit",
		metric.WithUnit("{request}/s"),
		metric.WithDescription("The adapted limit's rate, in requests per second."))
	if err != nil {
		return nil, err
	}
	for r := range a.add {
		name := adaptive.Reason(r).String()
		if r == numReasons-1 {
			name = "_OTHER"
		}
		kvs := append(append([]attribute.KeyValue(nil), a.base...), AdaptReasonKey.String(name))
		a.add[r] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(kvs...))}
	}
	return a, nil
}

// Watch registers the gauge ratelimit.adaptive.limit for ctrl (anything
// with a Limit method, such as an *adaptive.Controller): each collection
// reads its current limit. Watching again replaces the controller.
func (a *Adaptive) Watch(ctrl interface{ Limit() core.Limit }) error {
	a.ctl.Store(&limitSource{limit: ctrl.Limit})
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.reg != nil {
		return nil
	}
	opts := []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(a.base...))}
	reg, err := a.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		if src := a.ctl.Load(); src != nil {
			o.ObserveFloat64(a.gauge, perSecond(src.limit()), opts...)
		}
		return nil
	}, a.gauge)
	if err != nil {
		return err
	}
	a.reg = reg
	return nil
}

// perSecond is l's rate in requests per second.
func perSecond(l core.Limit) float64 {
	if l.IsInf() || l.Period() <= 0 {
		return 0
	}
	return float64(l.Rate()) / l.Period().Seconds()
}

// OnChange records a change: it counts it and makes a span with its
// event. Give it to adaptive.WithOnChange.
func (a *Adaptive) OnChange(c adaptive.Change) {
	ctx := context.Background()
	r := int(c.Reason)
	if r >= numReasons {
		r = numReasons - 1
	}
	if a.changes.Enabled(ctx) {
		a.changes.Add(ctx, 1, a.add[r]...)
	}
	if !a.tracing {
		return
	}
	_, span := a.tracer.Start(ctx, AdaptSpanName, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(a.base...))
	if span.IsRecording() {
		span.AddEvent(LimitChangedEventName, trace.WithAttributes(
			PreviousRateKey.String(c.Old.String()),
			RateKey.String(c.New.String()),
			AdaptReasonKey.String(c.Reason.String()),
			AdaptLocalKey.Bool(c.Local),
		))
	}
	span.End()
}

// Close unregisters the gauge's callback. The observer records nothing
// more through it; OnChange still counts and traces.
func (a *Adaptive) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.reg == nil {
		return nil
	}
	err := a.reg.Unregister()
	a.reg = nil
	return err
}
