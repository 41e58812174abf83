package telemetry

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/sluicehq/sluice/core"
)

// ScopeName is the instrumentation scope of the decorator's tracer and
// meter: its import path, as the OpenTelemetry contrib packages name
// theirs.
const ScopeName = "github.com/sluicehq/sluice/telemetry"

// Version is the version of this instrumentation, reported with
// [ScopeName].
const Version = "0.1.0"

// The names of the decorator's spans.
const (
	// SpanName names the span of every decision ([Store.Apply]), peeks,
	// refunds and reservations included, and of every batch of requests
	// decided together ([Store.ApplyAll], a sluice.Stack of several rules):
	// one span per batch.
	SpanName = "ratelimit.decide"
	// ResetSpanName names the span of [Store.Reset].
	ResetSpanName = "ratelimit.reset"
)

// HealedEventName names the event a decision's span gets for each request
// decided on a key whose value the store could not read and replaced
// ([core.Decision.Healed]); the event's attributes are the request's
// algorithm and, in a batch, its index ([BindingKey]'s numbering).
const HealedEventName = "ratelimit.state_healed"

// ErrInvalidOption reports an option [New] cannot use.
var ErrInvalidOption = errors.New("telemetry: invalid option")

// durationBounds are the bucket boundaries of ratelimit.decision.duration,
// in seconds: from a microsecond (an in-process decision) to a second (a
// Redis call stuck behind a slow script).
var durationBounds = []float64{
	1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4,
	1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1,
}

// Store is a decorator that traces and measures every decision of the
// store it wraps: one span per decision (one per batch of requests
// decided together, see [Store.ApplyAll]), started from the caller's
// context and passed down, so that the spans of a Redis client's own
// instrumentation (redisotel, rueidisotel) are its children; and the
// metrics of docs/telemetry.md. A decision's span is a child of the
// caller's: it is started only when the caller's context holds a span
// that is sampled or records, unless [WithRootSpans]. A denial is a
// decision, recorded in attributes; only a failure of the request or the
// store sets the span's status to Error.
//
// A request's key never goes into a metric. Spans carry it only hashed
// ([WithKeyHash]) or, when explicitly asked, raw ([WithRawKey]); by
// default not at all, and an error message that quotes the key has it
// replaced by "[key]" on the span unless the raw key is asked for.
//
// With providers that record nothing (the API's no-op providers, or the
// global ones before an SDK is installed) a decision costs a few
// nanoseconds more than the inner store's and allocates nothing.
//
// Make one with [New]. A Store is safe for concurrent use. Following the
// decorator contract of package core, Reset forwards to the inner store,
// Close closes it, and Unwrap returns it.
type Store struct {
	inner  core.Store
	closed atomic.Bool

	// Tracing.
	tracer    trace.Tracer
	startOpts []trace.SpanStartOption
	spans     gate // whether the tracer provider records
	roots     bool // WithRootSpans: offer every decision to the sampler
	keys      keyMode
	hashes    sync.Pool // of hash.Hash under the key secret
	base      []attribute.KeyValue
	breaker   Breaker

	// Metrics.
	decisions metric.Int64ObservableCounter
	counting  gate                // whether the decisions counted would be reported
	counts    metric.Registration // ratelimit.decisions' callback, or nil
	duration  metric.Float64Histogram
	errs      metric.Int64Counter
	near      metric.Int64Counter
	healed    metric.Int64Counter
	reg       metric.Registration // the breaker's callback, or nil
	algs      entries
}

var _ core.Store = (*Store)(nil)

// New returns a decorator that traces and measures the decisions of
// inner. It fails with an error wrapping [core.ErrNoStore] for a nil inner
// store and [ErrInvalidOption] for an option it cannot use. Instruments
// the meter provider refuses are reported to otel.Handle and replaced by
// no-op ones, as the OpenTelemetry contrib packages do.
//
// New registers the callback that reports ratelimit.decisions (an
// observable counter, see docs/telemetry.md) and, if a store of the chain
// implements [Breaker], the breaker's observable instruments; Close
// unregisters them, and a closed decorator's counts leave the export.
func New(inner core.Store, opts ...Option) (*Store, error) {
	if inner == nil {
		return nil, fmt.Errorf("telemetry: %w", core.ErrNoStore)
	}
	var cfg config
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if !cfg.storeSet {
		cfg.store = storeName(backend(inner))
	}
	s := &Store{inner: inner, keys: cfg.keys, roots: cfg.roots, breaker: findBreaker(inner)}
	if cfg.limiter != "" {
		s.base = append(s.base, LimiterKey.String(cfg.limiter))
	}
	s.base = append(s.base, StoreKey.String(cfg.store))
	s.algs.base = s.base
	if cfg.keys == keyHash {
		secret := cfg.secret
		s.hashes.New = func() any { return hmac.New(sha256.New, secret) }
	}

	tp := cfg.tp
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	switch {
	case isNoopTracerProvider(tp):
		s.spans.off = true
	case isGlobalDefault(tp, "tracerProvider"):
		s.spans.await(tp, func() any { return otel.GetTracerProvider() })
	}
	s.tracer = tp.Tracer(ScopeName, trace.WithInstrumentationVersion(Version), trace.WithSchemaURL(semconv.SchemaURL))
	s.startOpts = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}

	mp := cfg.mp
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	switch {
	case isNoopMeterProvider(mp):
		s.counting.off = true
	case isGlobalDefault(mp, "meterProvider"):
		s.counting.await(mp, func() any { return otel.GetMeterProvider() })
	}
	meter := mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version), metric.WithSchemaURL(semconv.SchemaURL))
	s.instruments(meter)
	if s.breaker != nil {
		reg, err := breakerMetrics(meter, s.breaker, s.base)
		if err != nil {
			otel.Handle(err)
		}
		s.reg = reg
	}
	return s, nil
}

// instruments makes the decorator's instruments, and registers the
// callback that reports the decisions it counts.
//
// ratelimit.decisions is an observable counter: the decorator counts each
// decision in an atomic counter of its attribute set, and the callback
// reports the totals at each collection. A synchronous counter would
// pass the SDK's attribute handling on every decision, which cost as
// much as the rest of a decision on memstore (see docs/telemetry.md).
func (s *Store) instruments(meter metric.Meter) {
	var err error
	s.decisions, err = meter.Int64ObservableCounter("ratelimit.decisions",
		metric.WithUnit("{decision}"),
		metric.WithDescription("Rate-limit decisions, by result (allowed, denied, error) and source."))
	if err != nil || s.decisions == nil {
		handle(err)
		s.decisions, s.counting.off = metricnoop.Int64ObservableCounter{}, true
	}
	if !s.counting.off {
		s.counts, err = meter.RegisterCallback(s.observeDecisions, s.decisions)
		if err != nil || s.counts == nil {
			handle(err)
			s.counts, s.counting.off = nil, true
		}
	}
	s.duration, err = meter.Float64Histogram("ratelimit.decision.duration",
		metric.WithUnit("s"),
		metric.WithDescription("Time taken by the store to decide."),
		metric.WithExplicitBucketBoundaries(durationBounds...))
	if err != nil || s.duration == nil {
		handle(err)
		s.duration = metricnoop.Float64Histogram{}
	}
	s.errs, err = meter.Int64Counter("ratelimit.store.errors",
		metric.WithUnit("{error}"),
		metric.WithDescription("Decisions that failed, by error.type."))
	if err != nil || s.errs == nil {
		handle(err)
		s.errs = metricnoop.Int64Counter{}
	}
	s.near, err = meter.Int64Counter("ratelimit.near_limit",
		metric.WithUnit("{decision}"),
		metric.WithDescription("Admitted decisions a policy marked near the limit (policy.WithNearLimit)."))
	if err != nil || s.near == nil {
		handle(err)
		s.near = metricnoop.Int64Counter{}
	}
	s.healed, err = meter.Int64Counter("ratelimit.store.healed",
		metric.WithUnit("{decision}"),
		metric.WithDescription("Decisions on a key whose value the store could not read (another client wrote it), decided as a fresh key and overwritten (core.Decision.Healed)."))
	if err != nil || s.healed == nil {
		handle(err)
		s.healed = metricnoop.Int64Counter{}
	}
}

// observeDecisions reports the decisions counted so far, by attribute
// set, as ratelimit.decisions' points.
func (s *Store) observeDecisions(_ context.Context, o metric.Observer) error {
	s.algs.each(func(a *algEntry) { a.observe(o, s.decisions) })
	return nil
}

// gate says whether a provider records: never a no-op one, nor the
// global default one (otel.GetTracerProvider's, otel.GetMeterProvider's)
// until an SDK has been installed in its place, which a decorator made
// before cannot see otherwise; the zero gate is open.
type gate struct {
	off      bool
	global   any        // the global default provider, until replaced
	current  func() any // the global provider now
	replaced atomic.Bool
}

// await keeps the gate shut while current returns global.
func (g *gate) await(global any, current func() any) { g.global, g.current = global, current }

// on reports whether the provider records.
func (g *gate) on() bool {
	switch {
	case g.off:
		return false
	case g.global != nil && !g.replaced.Load():
		if g.current() == g.global {
			return false
		}
		g.replaced.Store(true)
	}
	return true
}

func handle(err error) {
	if err != nil {
		otel.Handle(err)
	}
}

// isNoopTracerProvider reports a provider whose spans never record.
func isNoopTracerProvider(tp trace.TracerProvider) bool {
	switch tp.(type) {
	case tracenoop.TracerProvider, *tracenoop.TracerProvider:
		return true
	}
	return false
}

// isNoopMeterProvider reports a provider whose instruments never record.
func isNoopMeterProvider(mp metric.MeterProvider) bool {
	switch mp.(type) {
	case metricnoop.MeterProvider, *metricnoop.MeterProvider:
		return true
	}
	return false
}

// isGlobalDefault reports the provider otel.GetTracerProvider or
// otel.GetMeterProvider returns until an SDK is installed, whose type in
// OpenTelemetry's internal/global package is named name: it hands out
// tracers that start non-recording spans (which cost two allocations)
// and instruments that record nothing until then, and forwards to the
// SDK's after.
func isGlobalDefault(provider any, name string) bool {
	t := reflect.TypeOf(provider)
	return t.Kind() == reflect.Pointer &&
		t.Elem().PkgPath() == "go.opentelemetry.io/otel/internal/global" &&
		t.Elem().Name() == name
}

// tracing reports whether a span should be started for a call under
// ctx: not when the provider never records, nor while the global
// provider is still the default one (its spans would record nothing), and
// unless [WithRootSpans] was given, only under a span that is sampled or
// records (see docs/telemetry.md, "Which decisions have a span").
func (s *Store) tracing(ctx context.Context) bool {
	if !s.spans.on() {
		return false
	}
	if s.roots {
		return true
	}
	parent := trace.SpanFromContext(ctx)
	return parent.SpanContext().IsSampled() || parent.IsRecording()
}

// storeName names a backend by the last element of its type's package
// path, skipping a major version suffix ("/v2").
func storeName(s core.Store) string {
	t := reflect.TypeOf(s)
	if t.Kind() == reflect.Func { // a stores.Func, or a function type of your own
		return "func"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	path := t.PkgPath()
	if path == "" {
		return "unknown"
	}
	name := path[strings.LastIndexByte(path, '/')+1:]
	if isMajorVersion(name) && strings.Contains(path, "/") {
		path = path[:strings.LastIndexByte(path, '/')]
		name = path[strings.LastIndexByte(path, '/')+1:]
	}
	return name
}

func isMajorVersion(s string) bool {
	if len(s) < 2 || s[0] != 'v' {
		return false
	}
	for _, c := range s[1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// stopwatch times a decision for the duration histogram, when on.
// It reads the monotonic clock alone, once at each end: time.Now reads
// the wall clock too, which a duration does not need.
type stopwatch struct {
	on    bool
	start time.Duration // since clockBase
}

// clockBase is the instant stopwatches count from.
var clockBase = time.Now()

// seconds returns the time since the stopwatch started, or 0 if it is
// off.
func (w stopwatch) seconds() float64 {
	if !w.on {
		return 0
	}
	return (time.Since(clockBase) - w.start).Seconds()
}

// begin starts a decision's span, if it is traced (span is nil if not),
// and its stopwatch, if its duration is recorded.
func (s *Store) begin(ctx context.Context) (context.Context, trace.Span, stopwatch) {
	var span trace.Span
	if s.tracing(ctx) {
		ctx, span = s.tracer.Start(ctx, SpanName, s.startOpts...)
	}
	var w stopwatch
	if s.duration.Enabled(ctx) {
		w = stopwatch{on: true, start: time.Since(clockBase)}
	}
	return ctx, span, w
}

// Apply decides req with the inner store, in a span of its own, and
// records the decision's metrics. It returns exactly what the inner store
// returns; after [Store.Close] it fails with [core.ErrClosed].
func (s *Store) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	if s.closed.Load() {
		return core.Decision{}, core.ErrClosed
	}
	ctx, span, clock := s.begin(ctx)
	traced, timed := span != nil, clock.on
	d, err := s.inner.Apply(ctx, req)
	elapsed := clock.seconds()
	counted := s.counting.on()
	near := err == nil && s.isNear(&req, d)
	if !traced && !timed && !counted && !near && !d.Healed && err == nil {
		return d, nil
	}
	s.record(ctx, span, &req, d, err, elapsed, timed, counted, near)
	return d, err
}

// ApplyAll decides reqs together with the inner store, as a sluice.Stack
// of several rules asks, in one span named [SpanName]. The span's
// decision attributes are those of the batch's binding request
// ([core.Binding]), whose outcome is the batch's; for an admitted
// reservation, its delay is the longest of any request's. [BatchSizeKey],
// [BindingKey], [BatchAlgorithmsKey], [BatchAllowedKey] and
// [BatchRemainingKey] say what each request got.
//
// Each request's decision is counted in ratelimit.decisions as Apply
// counts one, by what that request decided: after a denial, the requests
// that would have been admitted count as allowed. Those of an admitted
// batch are counted in ratelimit.near_limit as Apply counts them. The
// batch's duration is recorded once, under the binding request's
// attributes, so the histogram counts calls by their outcome. A failed
// batch is one failure: one decision counted as an error and one store
// error, under the first request's attributes, and the span's status
// Error, with every request's key redacted from the error's message.
//
// ApplyAll returns exactly what the inner store returns; after
// [Store.Close] it fails with [core.ErrClosed].
func (s *Store) ApplyAll(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	if s.closed.Load() {
		return core.ErrClosed
	}
	ctx, span, clock := s.begin(ctx)
	traced, timed := span != nil, clock.on
	err := s.inner.ApplyAll(ctx, reqs, out)
	elapsed := clock.seconds()
	counted := s.counting.on()
	if err != nil {
		var req core.Request
		if len(reqs) > 0 {
			req = reqs[0]
		}
		s.record(ctx, nil, &req, core.Decision{}, err, elapsed, timed, counted, false)
		if span != nil {
			if span.IsRecording() {
				// The error may quote any request's key, not only the
				// first's.
				s.annotate(span, &req, core.Decision{}, s.redactAll(err, reqs), ErrorType(err))
				s.annotateBatch(span, reqs, nil, 0)
			}
			span.End()
		}
		return err
	}
	if len(reqs) == 0 || len(out) < len(reqs) {
		// An inner store that does not validate its batches answered
		// none with no decision to report: nothing to record.
		if span != nil {
			span.End()
		}
		return nil
	}
	out = out[:len(reqs)]
	near := s.near.Enabled(ctx)
	healed := false
	for i := range out {
		healed = healed || out[i].Healed
	}
	if !traced && !timed && !counted && !near && !healed {
		return nil
	}
	b := core.Binding(out)
	// A denied batch charged nothing: its rules that would have admitted
	// are counted as allowed, as each decided, but none is near its
	// limit.
	near = near && out[b].Allowed
	if timed || counted || near || healed {
		for i := range reqs {
			req, d := &reqs[i], out[i]
			s.record(ctx, nil, req, d, nil, elapsed, timed && i == b, counted, near && s.isNear(req, d))
		}
	}
	if span == nil {
		return nil
	}
	if span.IsRecording() {
		// An admitted reservation waits as long as its slowest rule; a
		// denied batch waits for nothing.
		d := out[b]
		if d.Allowed {
			for i := range out {
				d.Delay = max(d.Delay, out[i].Delay)
			}
		}
		s.annotate(span, &reqs[b], d, nil, "")
		s.annotateBatch(span, reqs, out, b)
	}
	span.End()
	return nil
}

// isNear reports whether an admitted charge or reservation was marked
// near its limit by a policy below (policy.WithNearLimit).
func (s *Store) isNear(req *core.Request, d core.Decision) bool {
	return d.Near && d.Allowed && req.Op != core.OpPeek && req.Op != core.OpRefund
}

// annotateBatch sets a recording span's batch attributes: the batch's
// size and each request's algorithm and, when out holds the decisions,
// the binding request's index b and each request's outcome and remaining.
func (s *Store) annotateBatch(span trace.Span, reqs []core.Request, out []core.Decision, b int) {
	algs := make([]string, len(reqs))
	for i := range reqs {
		algs[i] = algorithmName(&reqs[i])
	}
	if out == nil {
		span.SetAttributes(BatchSizeKey.Int(len(reqs)), BatchAlgorithmsKey.StringSlice(algs))
		return
	}
	allowed := make([]bool, len(reqs))
	remaining := make([]int64, len(reqs))
	for i := range reqs {
		allowed[i], remaining[i] = out[i].Allowed, out[i].Remaining
	}
	for i := range out[:len(reqs)] {
		if out[i].Healed && i != b {
			span.AddEvent(HealedEventName, trace.WithAttributes(AlgorithmKey.String(algs[i]), BindingKey.Int(i)))
		}
	}
	span.SetAttributes(
		BatchSizeKey.Int(len(reqs)),
		BindingKey.Int(b),
		BatchAlgorithmsKey.StringSlice(algs),
		BatchAllowedKey.BoolSlice(allowed),
		BatchRemainingKey.Int64Slice(remaining),
	)
}

// record records a decision's metrics, and its span's attributes and
// status, and ends the span (when span is not nil).
func (s *Store) record(ctx context.Context, span trace.Span, req *core.Request, d core.Decision, err error, elapsed float64, timed, counted, near bool) {
	var a *algEntry
	entry := func() *algEntry {
		if a == nil {
			a = s.algs.get(algorithmName(req))
		}
		return a
	}
	op := operation(req)
	var m *measure
	var n *atomic.Int64 // the count of m's decisions
	if err != nil {
		if counted || timed {
			a := entry()
			m, n = &a.failed[op], &a.failedN[op]
		}
	} else if counted || timed {
		allowed := 0
		if d.Allowed {
			allowed = 1
		}
		a, src := entry(), sourceIndex(d.Source)
		m, n = &a.decided[allowed][src][op], &a.decidedN[allowed][src][op]
	}
	if counted {
		n.Add(1)
	}
	if timed {
		s.duration.Record(ctx, elapsed, m.rec...)
	}
	if near && s.near.Enabled(ctx) {
		s.near.Add(ctx, 1, entry().plain.add...)
	}
	if err == nil && d.Healed && s.healed.Enabled(ctx) {
		s.healed.Add(ctx, 1, entry().plain.add...)
	}
	var typ string
	if err != nil {
		typ = ErrorType(err)
		if s.errs.Enabled(ctx) {
			s.errs.Add(ctx, 1, entry().errMeasure(typ).add...)
		}
	}
	if span == nil {
		return
	}
	if span.IsRecording() {
		s.annotate(span, req, d, err, typ)
	}
	span.End()
}

// algorithmName returns the name of req's algorithm; "none" for a request
// without one, which its store refuses.
func algorithmName(req *core.Request) string {
	if req.Terms == nil {
		return nameOf(nil)
	}
	return nameOf(req.Algorithm)
}

// nameOf returns alg's name; "none" for nil.
func nameOf(alg core.Algorithm) string {
	if alg == nil {
		return "none"
	}
	return alg.Name()
}

// maxAttrs is the most attributes a decision's span gets.
const maxAttrs = 18

// annotate sets a recording span's attributes and, for a failure, its
// error and status.
func (s *Store) annotate(span trace.Span, req *core.Request, d core.Decision, err error, typ string) {
	var buf [maxAttrs]attribute.KeyValue
	kv := append(buf[:0], s.base...)
	kv = append(kv,
		AlgorithmKey.String(algorithmName(req)),
		CostKey.Int64(req.Cost),
		OperationKey.String(operations[operation(req)]),
	)
	if req.Terms == nil {
		// Refused by the store: there is no more to say of it.
	} else if req.Op == core.OpReserve {
		kv = append(kv, MaxWaitKey.Float64(seconds(req.MaxWait)))
	}
	if req.Terms != nil && req.Algorithm != nil {
		kv = append(kv, RateKey.String(s.algs.get(req.Algorithm.Name()).rateString(req.Limit)))
	}
	if k, ok := s.keyAttr(req.Key); ok {
		kv = append(kv, k)
	}
	if s.breaker != nil {
		kv = append(kv, BreakerStateKey.String(s.breaker.BreakerState()))
	}
	if err != nil {
		kv = append(kv, ErrorTypeKey.String(typ))
		span.SetAttributes(kv...)
		rec := s.redact(err, req.Key)
		span.RecordError(rec)
		span.SetStatus(codes.Error, rec.Error())
		return
	}
	kv = append(kv,
		AllowedKey.Bool(d.Allowed),
		DecisionLimitKey.Int64(d.Limit),
		RemainingKey.Int64(d.Remaining),
		ResetAfterKey.Float64(seconds(d.ResetAfter)),
		SourceKey.String(sourceNames[sourceIndex(d.Source)]),
	)
	if d.Delay > 0 {
		kv = append(kv, DelayKey.Float64(seconds(d.Delay)))
	}
	if req.Op == core.OpAtMost {
		kv = append(kv, AdmittedKey.Int64(d.Admitted))
	}
	switch {
	case d.Unsatisfiable():
		kv = append(kv, UnsatisfiableKey.Bool(true))
	case !d.Allowed:
		kv = append(kv, RetryAfterKey.Float64(seconds(d.RetryAfter)))
	}
	span.SetAttributes(kv...)
	if d.Healed {
		span.AddEvent(HealedEventName, trace.WithAttributes(AlgorithmKey.String(algorithmName(req))))
	}
}

// seconds returns d in seconds, rounded once (Duration.Seconds adds two
// rounded parts: 1.999675 s would be 1.9996749999999999).
func seconds(d time.Duration) float64 { return float64(d) / float64(time.Second) }

// keyAttr returns the span attribute of a key, if the options ask for
// one.
func (s *Store) keyAttr(key string) (attribute.KeyValue, bool) {
	switch s.keys {
	case keyHash:
		return KeyHashKey.String(s.hashKey(key)), true
	case keyRaw:
		return KeyKey.String(key), true
	}
	return attribute.KeyValue{}, false
}

// hashKey returns the first 128 bits of HMAC-SHA-256(secret, key), in
// hex.
func (s *Store) hashKey(key string) string {
	h := s.hashes.Get().(hash.Hash)
	h.Reset()
	_, _ = io.WriteString(h, key)
	var sum [sha256.Size]byte
	b := h.Sum(sum[:0])
	s.hashes.Put(h)
	return hex.EncodeToString(b[:16])
}

// minRedacted is the shortest key redact looks for in an error message:
// a shorter one would match ordinary words.
const minRedacted = 4

// redact returns err, or an error with its message but every occurrence
// of key replaced by "[key]", unless the raw key was asked for.
func (s *Store) redact(err error, key string) error {
	if s.keys == keyRaw || len(key) < minRedacted {
		return err
	}
	msg := err.Error()
	if !strings.Contains(msg, key) {
		return err
	}
	return redactedError(strings.ReplaceAll(msg, key, "[key]"))
}

// redactAll returns err with the key of every request of a batch
// replaced by "[key]" (see [Store.redact]), the longest keys first, so
// that a key that is part of another is not replaced inside it.
func (s *Store) redactAll(err error, reqs []core.Request) error {
	if s.keys == keyRaw {
		return err
	}
	keys := make([]string, len(reqs))
	for i := range reqs {
		keys[i] = reqs[i].Key
	}
	slices.SortFunc(keys, func(a, b string) int { return len(b) - len(a) })
	for _, k := range keys {
		err = s.redact(err, k)
	}
	return err
}

// redactedError is a store's error whose message quoted the request's
// key.
type redactedError string

func (e redactedError) Error() string { return string(e) }

// Reset forwards to the inner store's Reset, in a span named
// [ResetSpanName]. It fails with [core.ErrClosed] after Close.
func (s *Store) Reset(ctx context.Context, key string, alg core.Algorithm) error {
	if s.closed.Load() {
		return core.ErrClosed
	}
	if !s.tracing(ctx) {
		return s.inner.Reset(ctx, key, alg)
	}
	ctx, span := s.tracer.Start(ctx, ResetSpanName, s.startOpts...)
	defer span.End()
	err := s.inner.Reset(ctx, key, alg)
	if span.IsRecording() {
		var buf [maxAttrs]attribute.KeyValue
		kv := append(append(buf[:0], s.base...), AlgorithmKey.String(nameOf(alg)))
		if k, ok := s.keyAttr(key); ok {
			kv = append(kv, k)
		}
		if err != nil {
			kv = append(kv, ErrorTypeKey.String(ErrorType(err)))
			rec := s.redact(err, key)
			span.RecordError(rec)
			span.SetStatus(codes.Error, rec.Error())
		}
		span.SetAttributes(kv...)
	}
	return err
}

// Close unregisters the breaker's instruments, if any, and closes the
// inner store. Later calls to Apply, ApplyAll and Reset fail with
// [core.ErrClosed]; a second Close does nothing and returns nil.
func (s *Store) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	var errs []error
	for _, reg := range []metric.Registration{s.counts, s.reg} {
		if reg == nil {
			continue
		}
		if err := reg.Unregister(); err != nil {
			errs = append(errs, fmt.Errorf("telemetry: unregister: %w", err))
		}
	}
	errs = append(errs, s.inner.Close())
	return errors.Join(errs...)
}

// Unwrap returns the inner store.
func (s *Store) Unwrap() core.Store { return s.inner }
