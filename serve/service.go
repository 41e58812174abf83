package serve

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/serve/limits"
)

// DefaultMaxDescriptors is how many descriptors one request may carry
// unless [WithMaxDescriptors] says otherwise. Envoy sends one per rate
// limit action that matched, a handful at most.
const DefaultMaxDescriptors = 64

// Errors a request is refused with, as gRPC InvalidArgument. Envoy treats
// an error as its failure_mode_deny setting says (by default it lets the
// request through), so these are kept for requests no Envoy configuration
// produces.
var (
	ErrNoDomain         = errors.New("serve: the request has no domain")
	ErrNoDescriptors    = errors.New("serve: the request has no descriptors")
	ErrManyDescriptors  = errors.New("serve: the request has more descriptors than allowed")
	ErrNilDescriptor    = errors.New("serve: the request has a null descriptor")
	errUnitMultiplier   = errors.New("serve: a limit override's unit_multiplier is 0")
	errOverrideUnit     = errors.New("serve: a limit override has no unit")
	errOverrideTooLarge = errors.New("serve: a limit override's period is too long")
)

// Service answers Envoy's rate-limit service API, RLS v3
// (envoy.service.ratelimit.v3.RateLimitService), over a sluice store: any
// [core.Store], typically a chain of telemetry, a policy and a breaker
// around a Redis store.
//
// Each request's descriptors are matched against the current limits
// ([limits.Set]), and every descriptor that has a limit is decided with
// the others as one atomic stack ([core.Store.ApplyAll]): the request is
// over the limit if any enforced descriptor is, and then no descriptor is
// charged. Descriptors in shadow mode are decided after the enforced ones,
// in a second store call, charged only if the enforced ones admitted the
// request, and always answered OK. docs/serve.md says where this differs
// from envoyproxy/ratelimit.
//
// A Service is safe for concurrent use; [Service.SetLimits] swaps the
// limits without stopping requests.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer

	store  core.Store
	limits atomic.Pointer[limits.Set]
	tracer trace.Tracer
	traced bool // WithTracerProvider was given
	maxDsc int
	hdr    *headerNames
	now    func() time.Time
	stats  Stats
	dstats descriptorStats
	// globalShadow turns OVER_LIMIT responses OK (WithGlobalShadowMode).
	globalShadow bool
	// exactReset reports duration_until_reset to the microsecond
	// (WithExactReset); else in whole seconds, as envoyproxy/ratelimit.
	exactReset bool
	// unitMultiplier honours a limit override's unit_multiplier
	// (WithUnitMultiplier).
	unitMultiplier bool
}

// Stats counts what a [Service] answered. Read it with [Service.Stats].
type Stats struct {
	RPCs         atomic.Int64 // requests answered, with a response or an error
	OverLimit    atomic.Int64 // responses whose overall code was OVER_LIMIT
	Invalid      atomic.Int64 // requests refused as invalid
	StoreErrors  atomic.Int64 // requests that failed because the store did
	ShadowDeny   atomic.Int64 // shadow-mode descriptors that were over their limit
	Unavailable  atomic.Int64 // descriptors decided while the store was down (fail-open, fail-closed or degraded)
	LocalCache   atomic.Int64 // descriptors denied by a local cache of denials, without asking the remote store
	GlobalShadow atomic.Int64 // OVER_LIMIT responses answered OK under WithGlobalShadowMode
}

// headerNames are the response headers' names; nil: no headers.
type headerNames struct{ limit, remaining, reset string }

// Option configures a [Service].
type Option func(*Service) error

// WithMaxDescriptors sets how many descriptors one request may carry
// (1 to 4096; [DefaultMaxDescriptors] by default). A request with more is
// refused with InvalidArgument, so that no request can make one atomic
// decision over an unbounded number of keys.
func WithMaxDescriptors(n int) Option {
	return func(s *Service) error {
		if n < 1 || n > 4096 {
			return fmt.Errorf("serve: WithMaxDescriptors(%d): want 1 to 4096", n)
		}
		s.maxDsc = n
		return nil
	}
}

// WithHeaders makes every response carry rate-limit headers for Envoy to
// add to the client's response, as envoyproxy/ratelimit's
// LIMIT_RESPONSE_HEADERS_ENABLED does: the named headers hold the binding
// descriptor's requests_per_unit, limit_remaining and the whole seconds
// until it resets. Empty names take envoyproxy/ratelimit's defaults,
// RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset.
func WithHeaders(limit, remaining, reset string) Option {
	return func(s *Service) error {
		h := &headerNames{limit, remaining, reset}
		for p, def := range map[*string]string{&h.limit: "RateLimit-Limit", &h.remaining: "RateLimit-Remaining", &h.reset: "RateLimit-Reset"} {
			if *p == "" {
				*p = def
			}
		}
		s.hdr = h
		return nil
	}
}

// WithDescriptorStats sets how many descriptors the service counts hits
// for, each under the name envoyproxy/ratelimit gives its stats
// ("domain.key_value.key"; see [Service.DescriptorStats]);
// [DefaultMaxDescriptorStats] by default, 0 for none. A rule with
// detailed_metric or value_to_metric names a descriptor by its request's
// values, so the names are unbounded: the counts of names beyond n are
// kept together, under [OtherDescriptors]. n must be 0 to 1,000,000.
func WithDescriptorStats(n int) Option {
	return func(s *Service) error {
		if n < 0 || n > 1_000_000 {
			return fmt.Errorf("serve: WithDescriptorStats(%d): want 0 to 1,000,000", n)
		}
		s.dstats.max = int64(n)
		return nil
	}
}

// WithNearLimitRatio sets the share of a limit past which admitted hits
// count as near the limit in the per-descriptor stats
// ([DescriptorStats.NearLimit]), as envoyproxy/ratelimit's
// NEAR_LIMIT_RATIO; [DefaultNearLimitRatio] by default. r must be above 0
// and at most 1.
func WithNearLimitRatio(r float64) Option {
	return func(s *Service) error {
		if !(r > 0 && r <= 1) {
			return fmt.Errorf("serve: WithNearLimitRatio(%v): want above 0, at most 1", r)
		}
		s.dstats.ratio = float32(r)
		return nil
	}
}

// WithGlobalShadowMode answers every request OK, as envoyproxy/ratelimit's
// SHADOW_MODE: each descriptor is decided (a denial charges nothing, as
// ever) and its status says OVER_LIMIT where it is over, but the
// response's overall code is OK. [Stats.GlobalShadow] counts the
// responses it turned.
func WithGlobalShadowMode() Option {
	return func(s *Service) error {
		s.globalShadow = true
		return nil
	}
}

// WithExactReset reports each descriptor's duration_until_reset to the
// microsecond. By default it is in whole seconds, rounded up, as
// envoyproxy/ratelimit reports it and Envoy reads it: Envoy builds
// X-RateLimit-Reset from the seconds alone, so an exact 14.99 s would
// read 14, and every per-second limit's 0.4 s would read 0. For a fixed
// window, the rounded figure is the peer's: the unit's length minus the
// Unix second (of the decision, on the store's clock) modulo it.
func WithExactReset() Option {
	return func(s *Service) error {
		s.exactReset = true
		return nil
	}
}

// WithUnitMultiplier decides a limit override (Envoy's limit in a rate
// limit action) over its unit × unit_multiplier, a window of that
// length, as Envoy's API describes it; unit_multiplier 0 is then
// refused as InvalidArgument. By default the multiplier is ignored, as
// envoyproxy/ratelimit ignores it: 2 per SECOND × 60 is 2 a second,
// reset within the second.
func WithUnitMultiplier() Option {
	return func(s *Service) error {
		s.unitMultiplier = true
		return nil
	}
}

// WithTracerProvider traces each request with a span named
// "sluice.rls.ShouldRateLimit" from tp; the store chain's own spans (from
// package telemetry) are its children. A request whose gRPC metadata
// carries a W3C traceparent (as Envoy's rate limit filter sends when
// Envoy traces with OpenTelemetry) is traced as its child, in its trace.
// Without it, requests are not traced here.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(s *Service) error {
		if tp == nil {
			return errors.New("serve: WithTracerProvider(nil)")
		}
		s.tracer = tp.Tracer("github.com/sluicehq/sluice/serve")
		s.traced = true
		return nil
	}
}

// traceContext reads a caller's W3C trace context from its metadata.
var traceContext = propagation.TraceContext{}

// metadataCarrier is a request's incoming gRPC metadata, for a
// propagator to read.
type metadataCarrier metadata.MD

// Get returns key's first value.
func (m metadataCarrier) Get(key string) string {
	if v := metadata.MD(m).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set sets key to value.
func (m metadataCarrier) Set(key, value string) { metadata.MD(m).Set(key, value) }

// Keys returns the keys.
func (m metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// NewService returns a service deciding on store under set. Neither may be
// nil. The service does not own store: close it after the service's last
// request.
func NewService(store core.Store, set *limits.Set, opts ...Option) (*Service, error) {
	if store == nil {
		return nil, core.ErrNoStore
	}
	if set == nil {
		return nil, errors.New("serve: NewService needs a limits.Set")
	}
	s := &Service{store: store, maxDsc: DefaultMaxDescriptors, tracer: noop.NewTracerProvider().Tracer(""), now: time.Now}
	s.dstats.max = DefaultMaxDescriptorStats
	s.dstats.ratio = DefaultNearLimitRatio
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	s.limits.Store(set)
	return s, nil
}

// SetLimits makes set the limits every later request is decided under.
// Requests in flight finish under the limits they started with.
func (s *Service) SetLimits(set *limits.Set) {
	if set != nil {
		s.limits.Store(set)
	}
}

// Limits returns the limits in force.
func (s *Service) Limits() *limits.Set { return s.limits.Load() }

// Stats returns the service's counters.
func (s *Service) Stats() *Stats { return &s.stats }

// DescriptorStats returns the counts of the descriptor named name, as
// envoyproxy/ratelimit names its per-descriptor stats: the domain, then
// each entry's key, with "_" and its value where the rule's
// configuration gives one ("api.user", "api.user_alice" under
// detailed_metric or for a descriptor configured by value; an override's
// "domain.key_value…"); [OtherDescriptors] for the descriptors beyond
// [WithDescriptorStats]'s bound. It reports false if none was counted.
func (s *Service) DescriptorStats(name string) (DescriptorStats, bool) {
	if name == OtherDescriptors {
		st := s.dstats.other.load()
		return st, st.TotalHits > 0
	}
	c, ok := s.dstats.names.Load(name)
	if !ok {
		return DescriptorStats{}, false
	}
	return c.(*descriptorCounts).load(), true
}

// slot is what one descriptor of a request comes to.
type slot struct {
	rule      *limits.Rule
	key       string // the key its state is kept under
	unlimited bool   // no limit at all: answered with limit_remaining 2^32-1
	shadow    bool
	req       int   // the request's index in its batch; -1: none
	hits      int64 // the descriptor's own cost
	counts    *descriptorCounts
}

// ShouldRateLimit decides a request: see [Service].
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	s.stats.RPCs.Add(1)
	if !s.traced {
		return s.decide(ctx, req)
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		ctx = traceContext.Extract(ctx, metadataCarrier(md))
	}
	ctx, span := s.tracer.Start(ctx, "sluice.rls.ShouldRateLimit", trace.WithSpanKind(trace.SpanKindServer))
	defer span.End()
	resp, err := s.decide(ctx, req)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return nil, err
	}
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("rls.domain", req.GetDomain()),
			attribute.Int("rls.descriptors", len(req.GetDescriptors())),
			attribute.String("rls.overall_code", resp.OverallCode.String()))
	}
	return resp, nil
}

// scratch is what deciding one request needs besides its response: each
// descriptor's slot, and the requests and decisions of its store calls.
// Requests take one from scratchPool and give it back, so that a
// decision allocates its response and its keys, not its working memory.
type scratch struct {
	slots []slot
	reqs  [2][]core.Request  // the enforced descriptors' requests, and the shadow ones'
	outs  [2][]core.Decision // their decisions
}

// scratchPool holds scratches of requests with at most
// DefaultMaxDescriptors descriptors; a larger one is left to the
// collector.
var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// reset empties sc for a request of n descriptors.
func (sc *scratch) reset(n int) {
	sc.slots = slices.Grow(sc.slots[:0], n)[:n]
	for i := range sc.reqs {
		sc.reqs[i] = slices.Grow(sc.reqs[i][:0], n)
	}
}

// release clears sc's references to the request and returns it to the
// pool.
func (sc *scratch) release() {
	if cap(sc.slots) > DefaultMaxDescriptors {
		return
	}
	clear(sc.slots)
	for i := range sc.reqs {
		clear(sc.reqs[i][:cap(sc.reqs[i])])
	}
	scratchPool.Put(sc)
}

func (s *Service) decide(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if err := s.check(req); err != nil {
		s.stats.Invalid.Add(1)
		return nil, status.Error(grpccodes.InvalidArgument, err.Error())
	}
	set := s.limits.Load()
	dscs := req.Descriptors
	sc := scratchPool.Get().(*scratch)
	defer sc.release()
	sc.reset(len(dscs))
	slots := sc.slots
	var replaced map[string]bool
	for i, d := range dscs {
		rule, key, name, err := s.match(set, req.Domain, d)
		if err != nil {
			s.stats.Invalid.Add(1)
			return nil, status.Error(grpccodes.InvalidArgument, fmt.Sprintf("descriptor %d: %v", i, err))
		}
		slots[i] = slot{rule: rule, key: key, req: -1}
		if rule != nil && !rule.Unlimited {
			slots[i].hits = hits(req, d)
			slots[i].counts = s.dstats.of(name)
		}
		for _, name := range ruleReplaces(rule) {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			replaced[name] = true
		}
	}
	enforce, shadow := sc.reqs[0], sc.reqs[1]
	for i, d := range dscs {
		sl := &slots[i]
		rule := sl.rule
		switch {
		case rule == nil:
			continue
		case rule.Unlimited:
			*sl = slot{unlimited: true, req: -1}
			continue
		case rule.Name != "" && replaced[rule.Name]:
			*sl = slot{req: -1} // neither decided nor counted
			continue
		}
		sl.shadow = rule.Shadow
		if rule.Deny {
			continue // over the limit whatever the store holds
		}
		r := core.Request{Key: sl.key, Cost: sl.hits, Terms: &rule.Terms}
		if d.GetIsNegativeHits() {
			r.Op = core.OpRefund
		}
		if sl.shadow {
			shadow, sl.req = add(shadow, r)
		} else {
			enforce, sl.req = add(enforce, r)
		}
	}
	sc.reqs[0], sc.reqs[1] = enforce, shadow
	// A rule that denies everything is over the limit before the store
	// is asked; then the enforced descriptors are only looked at.
	denied := false
	for _, sl := range slots {
		denied = denied || sl.rule != nil && sl.rule.Deny && !sl.shadow
	}
	if denied {
		peek(enforce)
	}
	sc.outs[0] = slices.Grow(sc.outs[0][:0], len(enforce))[:len(enforce)]
	if err := s.apply(ctx, enforce, sc.outs[0]); err != nil {
		return nil, err
	}
	in := sc.outs[0]
	admitted := !denied && allowed(in)
	if !admitted {
		peek(shadow)
	}
	sc.outs[1] = slices.Grow(sc.outs[1][:0], len(shadow))[:len(shadow)]
	if err := s.apply(ctx, shadow, sc.outs[1]); err != nil {
		return nil, err
	}
	sh := sc.outs[1]
	batches := [2]batch{{enforce, in, admitted}, {shadow, sh, admitted && allowed(sh)}}
	return s.respond(slots, &batches), nil
}

// ruleReplaces returns the names r replaces; none if r is nil.
func ruleReplaces(r *limits.Rule) []string {
	if r == nil {
		return nil
	}
	return r.Replaces
}

// check refuses what no Envoy sends and what would make a decision
// unbounded.
func (s *Service) check(req *rlsv3.RateLimitRequest) error {
	switch {
	case req.GetDomain() == "":
		return ErrNoDomain
	case len(req.GetDescriptors()) == 0:
		return ErrNoDescriptors
	case len(req.Descriptors) > s.maxDsc:
		return fmt.Errorf("%w: %d, at most %d", ErrManyDescriptors, len(req.Descriptors), s.maxDsc)
	}
	for i, d := range req.Descriptors {
		if d == nil {
			return fmt.Errorf("%w (descriptor %d)", ErrNilDescriptor, i)
		}
	}
	return nil
}

// match finds a descriptor's rule, the key its state is kept under and
// its stats name. A descriptor carrying a limit override (Envoy's limit:
// in a rate limit action) is limited by the override, on a fixed window,
// as envoyproxy/ratelimit does, if its domain is configured; its state is
// kept apart from a configured rule's on the same entries.
func (s *Service) match(set *limits.Set, domain string, d *ratelimitv3.RateLimitDescriptor) (*limits.Rule, string, string, error) {
	var small [4]limits.Entry // most descriptors: no allocation
	entries := small[:0]
	for _, e := range d.Entries {
		entries = append(entries, limits.Entry{Key: e.GetKey(), Value: e.GetValue()})
	}
	if o := d.GetLimit(); o != nil && set.HasDomain(domain) {
		r, err := overrideRule(o, s.unitMultiplier)
		if err != nil {
			return nil, "", "", err
		}
		return r, limits.Key(domain, entries), limits.OverrideMetric(domain, entries), nil
	}
	m := set.Match(domain, entries)
	return m.Rule, m.Key, m.Metric, nil
}

// overrideAlg keeps an override's state apart from a configured fixed
// window's on the same key.
var overrideAlg = core.Named(algorithms.FixedWindow, "override")

// overrideRule is the rule a limit override stands for: per its unit,
// times its unit_multiplier if mult.
func overrideRule(o *ratelimitv3.RateLimitDescriptor_RateLimitOverride, honourMult bool) (*limits.Rule, error) {
	unit := rlsv3.RateLimitResponse_RateLimit_Unit(o.GetUnit()) // the two enums agree, as envoyproxy/ratelimit assumes
	period := limits.UnitPeriod(unit)
	if period == 0 {
		return nil, errOverrideUnit
	}
	mult := int64(1)
	if m := o.GetUnitMultiplier(); m != nil && honourMult {
		if m.Value == 0 {
			return nil, errUnitMultiplier
		}
		mult = int64(m.Value)
	}
	if period > core.MaxPeriod/time.Duration(mult) {
		return nil, errOverrideTooLarge
	}
	r := &limits.Rule{Terms: core.Terms{Algorithm: overrideAlg}, Unit: unit, RequestsPerUnit: o.RequestsPerUnit}
	if o.RequestsPerUnit == 0 {
		r.Deny = true
		return r, nil
	}
	r.Limit = limits.WindowLimit(int64(o.RequestsPerUnit), period*time.Duration(mult))
	return r, nil
}

// hits is a descriptor's cost: its own hits_addend if it has one, else
// the request's, at least 1. A cost beyond any limit's capacity is cut to
// the largest sluice takes, which every limit still denies.
func hits(req *rlsv3.RateLimitRequest, d *ratelimitv3.RateLimitDescriptor) int64 {
	n := uint64(max(req.HitsAddend, 1))
	if h := d.GetHitsAddend(); h != nil {
		n = h.Value
	}
	return int64(min(n, core.MaxUnits))
}

// add appends r to reqs, or adds its cost to a request already there for
// the same state (two descriptors with the same entries), and returns the
// index it went to.
func add(reqs []core.Request, r core.Request) ([]core.Request, int) {
	for i := range reqs {
		if reqs[i].Key == r.Key && reqs[i].Algorithm.Name() == r.Algorithm.Name() && reqs[i].Op == r.Op {
			reqs[i].Cost = min(reqs[i].Cost+r.Cost, core.MaxUnits)
			return reqs, i
		}
	}
	return append(reqs, r), len(reqs)
}

// allowed reports whether every decision admitted.
func allowed(ds []core.Decision) bool {
	for _, d := range ds {
		if !d.Allowed {
			return false
		}
	}
	return true
}

// peek turns charges into looks, so that reqs report what they would get
// and change nothing.
func peek(reqs []core.Request) {
	for i := range reqs {
		if reqs[i].Op == core.OpCharge {
			reqs[i].Op = core.OpPeek
		}
	}
}

// apply decides a batch in one store call, writing its decisions to out:
// one atomic decision, which stores/layered answers from its allotments
// when every descriptor of the batch has one that holds enough.
func (s *Service) apply(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	var err error
	switch len(reqs) {
	case 0:
		return nil
	case 1:
		out[0], err = s.store.Apply(ctx, reqs[0])
	default:
		err = s.store.ApplyAll(ctx, reqs, out)
	}
	if err != nil {
		return s.storeError(err)
	}
	return nil
}

// storeError is the gRPC status for a store's error: InvalidArgument for a
// request sluice cannot decide, Unavailable for a store that failed (with
// a breaker in the chain, only where its mode lets errors through).
func (s *Service) storeError(err error) error {
	for _, bad := range []error{core.ErrInvalidRequest, core.ErrInvalidCost, core.ErrInvalidLimit, core.ErrInvalidTime, core.ErrInvalidKey, core.ErrNoAlgorithm, core.ErrUnsupported} {
		if errors.Is(err, bad) {
			s.stats.Invalid.Add(1)
			return status.Error(grpccodes.InvalidArgument, err.Error())
		}
	}
	s.stats.StoreErrors.Add(1)
	if errors.Is(err, context.Canceled) {
		return status.Error(grpccodes.Canceled, err.Error())
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return status.Error(grpccodes.DeadlineExceeded, err.Error())
	}
	return status.Error(grpccodes.Unavailable, err.Error())
}

// batch is one store call's requests and decisions, and whether they were
// charged: [Service.decide] makes two, the enforced descriptors' and the
// shadow ones'.
type batch struct {
	reqs    []core.Request
	out     []core.Decision
	charged bool
}

// batch returns the index of the slot's batch in [Service.decide]'s two.
func (sl *slot) batch() int {
	if sl.shadow {
		return 1
	}
	return 0
}

// respond builds the response from each descriptor's slot and the
// decisions of the enforced and shadow batches.
func (s *Service) respond(slots []slot, batches *[2]batch) *rlsv3.RateLimitResponse {
	resp, sts, curs, durs := newResponse(len(slots))
	var binding *rlsv3.RateLimitResponse_DescriptorStatus
	for i, sl := range slots {
		st := &sts[i]
		st.Code = rlsv3.RateLimitResponse_OK
		resp.Statuses[i] = st
		switch {
		case sl.unlimited:
			st.LimitRemaining = math.MaxUint32
			continue
		case sl.rule == nil:
			continue
		}
		cur := &curs[i]
		cur.Name, cur.RequestsPerUnit, cur.Unit = sl.rule.Name, sl.rule.RequestsPerUnit, sl.rule.Unit
		var d core.Decision
		switch {
		case sl.rule.Deny:
			d = core.Decision{RetryAfter: core.RetryNever}
		default:
			d = batches[sl.batch()].out[sl.req]
		}
		switch d.Source {
		case core.SourceFailOpen:
			// Nothing is known of the limit: no current_limit, so that
			// Envoy adds no headers from it.
			s.stats.Unavailable.Add(1)
			sl.counts.hit(sl.hits)
			continue
		case core.SourceFailClosed, core.SourceDegraded:
			s.stats.Unavailable.Add(1)
		case core.SourceCache:
			if d.Allowed {
				// Not asked: another descriptor's denial was cached
				// (stores/layered), so nothing is known of what this
				// one has left.
				st.CurrentLimit = cur
				sl.counts.hit(sl.hits)
				continue
			}
			s.stats.LocalCache.Add(1)
		}
		sl.counts.count(sl.hits, d.Allowed, sl.shadow, d.Source == core.SourceCache, d.Limit, d.Remaining, s.dstats.ratio)
		st.CurrentLimit = cur
		remaining := d.Remaining
		if b := &batches[sl.batch()]; d.Allowed && !b.charged && sl.req >= 0 && b.reqs[sl.req].Op != core.OpRefund {
			// Another descriptor denied the request, so this one was
			// not charged: what is left is what its decision would have
			// left, plus the cost it did not take.
			remaining = min(remaining+b.reqs[sl.req].Cost, core.MaxUnits)
		}
		st.LimitRemaining = uint32(min(remaining, math.MaxUint32))
		reset := s.untilReset(sl.rule, d)
		if !s.exactReset {
			reset = (reset + time.Second - 1).Truncate(time.Second)
		}
		durs[i].Seconds, durs[i].Nanos = int64(reset/time.Second), int32(reset%time.Second)
		st.DurationUntilReset = &durs[i]
		if !d.Allowed {
			if sl.shadow {
				s.stats.ShadowDeny.Add(1)
			} else {
				st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
				resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			}
		}
		if binding == nil || st.Code == rlsv3.RateLimitResponse_OVER_LIMIT && binding.Code != st.Code ||
			st.Code == binding.Code && st.LimitRemaining < binding.LimitRemaining {
			binding = st
		}
	}
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		s.stats.OverLimit.Add(1)
	}
	if s.hdr != nil && binding != nil {
		resp.ResponseHeadersToAdd = s.headers(binding)
	}
	if s.globalShadow && resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		resp.OverallCode = rlsv3.RateLimitResponse_OK
		s.stats.GlobalShadow.Add(1)
	}
	return resp
}

// smallResponse is a response of up to four descriptors and every
// message in it, made in one allocation: Envoy sends a handful of
// descriptors, and a message each was a fifth of what a request
// allocated.
type smallResponse struct {
	resp rlsv3.RateLimitResponse
	ptrs [4]*rlsv3.RateLimitResponse_DescriptorStatus
	sts  [4]rlsv3.RateLimitResponse_DescriptorStatus
	curs [4]rlsv3.RateLimitResponse_RateLimit
	durs [4]durationpb.Duration
}

// newResponse returns an OK response with n statuses, and the messages
// its statuses may point to: each status, its current limit and its
// duration until reset.
func newResponse(n int) (*rlsv3.RateLimitResponse, []rlsv3.RateLimitResponse_DescriptorStatus, []rlsv3.RateLimitResponse_RateLimit, []durationpb.Duration) {
	if n <= 4 {
		m := new(smallResponse)
		m.resp.OverallCode = rlsv3.RateLimitResponse_OK
		m.resp.Statuses = m.ptrs[:n]
		return &m.resp, m.sts[:n], m.curs[:n], m.durs[:n]
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)}
	return resp, make([]rlsv3.RateLimitResponse_DescriptorStatus, n), make([]rlsv3.RateLimitResponse_RateLimit, n), make([]durationpb.Duration, n)
}

// untilReset is a descriptor's duration_until_reset: after a denial, the
// wait until the same request would pass (a fixed window's end, as
// envoyproxy/ratelimit reports); after an admission, the wait until the
// key is back to its full limit. A fixed window that counted nothing, and
// a limit of zero, report their window's end, as envoyproxy/ratelimit
// does.
func (s *Service) untilReset(r *limits.Rule, d core.Decision) time.Duration {
	if !d.Allowed && d.RetryAfter != core.RetryNever {
		return d.RetryAfter
	}
	if d.ResetAfter > 0 {
		return d.ResetAfter
	}
	var period time.Duration
	switch {
	case r.Deny:
		period = limits.UnitPeriod(r.Unit)
	case isFixedWindow(r.Algorithm):
		period = r.Limit.Period()
	}
	if period <= 0 {
		return 0
	}
	// The window's end on the store's clock: the decision's instant. A
	// limit of zero was decided without the store, on this one's.
	at := d.At
	if at.IsZero() {
		at = s.now()
	}
	per := period.Microseconds()
	return time.Duration(per-at.UnixMicro()%per) * time.Microsecond
}

func isFixedWindow(alg core.Algorithm) bool {
	for i := 0; i < 16 && alg != nil; i++ {
		if alg == algorithms.FixedWindow {
			return true
		}
		u, ok := alg.(interface{ Unwrap() core.Algorithm })
		if !ok {
			return false
		}
		alg = u.Unwrap()
	}
	return false
}

// headers are the rate-limit headers for the binding descriptor's status.
func (s *Service) headers(st *rlsv3.RateLimitResponse_DescriptorStatus) []*corev3.HeaderValue {
	reset := st.DurationUntilReset.AsDuration()
	secs := int64((reset + time.Second - 1) / time.Second)
	return []*corev3.HeaderValue{
		{Key: s.hdr.limit, Value: strconv.FormatUint(uint64(st.CurrentLimit.RequestsPerUnit), 10)},
		{Key: s.hdr.remaining, Value: strconv.FormatUint(uint64(st.LimitRemaining), 10)},
		{Key: s.hdr.reset, Value: strconv.FormatInt(secs, 10)},
	}
}
