package telemetry_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores"
	"github.com/sluicehq/sluice/stores/memstore"
	"github.com/sluicehq/sluice/stores/storetest"
	"github.com/sluicehq/sluice/telemetry"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// wantDecision returns the attributes a decision's span must carry, for a
// decorator named limiter over a store named store, with no key option
// and no breaker.
func wantDecision(limiter, store string, req core.Request, d core.Decision) map[attribute.Key]attribute.Value {
	want := kvs(
		telemetry.LimiterKey.String(limiter),
		telemetry.StoreKey.String(store),
		telemetry.AlgorithmKey.String(req.Algorithm.Name()),
		telemetry.RateKey.String(req.Limit.String()),
		telemetry.CostKey.Int64(req.Cost),
		telemetry.OperationKey.String(opName(req)),
		telemetry.AllowedKey.Bool(d.Allowed),
		telemetry.DecisionLimitKey.Int64(d.Limit),
		telemetry.RemainingKey.Int64(d.Remaining),
		telemetry.ResetAfterKey.Float64(float64(d.ResetAfter)/float64(time.Second)),
		telemetry.SourceKey.String(d.Source.String()),
	)
	if req.Op == core.OpReserve {
		want[telemetry.MaxWaitKey] = attribute.Float64Value(float64(req.MaxWait) / float64(time.Second))
	}
	if d.Delay > 0 {
		want[telemetry.DelayKey] = attribute.Float64Value(float64(d.Delay) / float64(time.Second))
	}
	switch {
	case d.Unsatisfiable():
		want[telemetry.UnsatisfiableKey] = attribute.BoolValue(true)
	case !d.Allowed:
		want[telemetry.RetryAfterKey] = attribute.Float64Value(float64(d.RetryAfter) / float64(time.Second))
	}
	if limiter == "" {
		delete(want, telemetry.LimiterKey)
	}
	return want
}

// opName is the ratelimit.operation of req.
func opName(req core.Request) string {
	switch {
	case req.Op == core.OpPeek:
		return "peek"
	case req.Op == core.OpRefund:
		return "refund"
	case req.Op == core.OpReserve:
		return "reserve"
	}
	return "charge"
}

// checkDecisionSpan checks what every decision's span shares: its name,
// kind, scope and parent, and that a decision (even a denial) leaves the
// status unset and records no event.
func checkDecisionSpan(t testing.TB, what string, s interface {
	Name() string
	SpanKind() trace.SpanKind
}, status codes.Code, wantStatus codes.Code) {
	t.Helper()
	if s.Name() != telemetry.SpanName {
		t.Errorf("%s: span name %q, want %q", what, s.Name(), telemetry.SpanName)
	}
	if s.SpanKind() != trace.SpanKindInternal {
		t.Errorf("%s: span kind %v, want internal", what, s.SpanKind())
	}
	if status != wantStatus {
		t.Errorf("%s: status %v, want %v", what, status, wantStatus)
	}
}

// TestDecisionSpans runs a token bucket through admissions, a denial, a
// peek, an unsatisfiable cost, a refund, a reservation and an unlimited
// request, and checks every
// span attribute, the status (never Error: a denial is a decision) and the
// counters.
func TestDecisionSpans(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nearAt(t, newMem(t), 0.1), telemetry.WithName("api"))
	ctx := context.Background()
	limit := core.PerSecond(1).WithBurst(3)
	req := func(cost int64, peek bool) core.Request {
		r := core.Request{Key: "user:1", Cost: cost, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: limit, Now: t0}}
		if peek {
			r.Op = core.OpPeek
		}
		return r
	}
	refund := req(1, false)
	refund.Op = core.OpRefund
	reserve := req(2, false)
	reserve.Op, reserve.MaxWait = core.OpReserve, 5*time.Second
	steps := []struct {
		name      string
		req       core.Request
		allowed   bool
		remaining int64
	}{
		{"Allow 1", req(1, false), true, 2},
		{"Allow 2", req(2, false), true, 0},
		{"Allow 3 (denied)", req(1, false), false, 0},
		{"Peek (denied)", req(1, true), false, 0},
		{"AllowN 5 (unsatisfiable)", req(5, false), false, 0},
		{"Refund 1", refund, true, 1},
		{"Reserve 2 (1 s delay)", reserve, true, 0},
		{"Allow (unlimited)", core.Request{Key: "user:1", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.GCRA, Limit: core.Inf}}, true, math.MaxInt64},
	}
	for i, st := range steps {
		what := fmt.Sprintf("step %d: %s", i, st.name)
		d, err := h.store.Apply(ctx, st.req)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if d.Allowed != st.allowed || d.Remaining != st.remaining {
			t.Errorf("%s: allowed %v remaining %d, want %v %d", what, d.Allowed, d.Remaining, st.allowed, st.remaining)
		}
		if st.req.Op == core.OpReserve && d.Delay != time.Second {
			t.Errorf("%s: delay %v, want 1s", what, d.Delay)
		}
		s := h.onlySpan(t)
		checkDecisionSpan(t, what, s, s.Status().Code, codes.Unset)
		if len(s.Events()) != 0 {
			t.Errorf("%s: %d events, want none", what, len(s.Events()))
		}
		if s.Parent().IsValid() {
			t.Errorf("%s: span has a parent, want a root", what)
		}
		if sc := s.InstrumentationScope(); sc.Name != telemetry.ScopeName || sc.Version != telemetry.Version {
			t.Errorf("%s: scope %+v", what, sc)
		}
		checkAttrs(t, what, s, wantDecision("api", "memstore", st.req, d))
	}

	// The denial's retry-after is exact: one token at 1/s.
	ms := h.collect(t)
	base := []attribute.KeyValue{telemetry.LimiterKey.String("api"), telemetry.StoreKey.String("memstore")}
	for _, c := range []struct {
		attrs []attribute.KeyValue
		want  float64
	}{
		{[]attribute.KeyValue{telemetry.ResultKey.String("allowed"), telemetry.OperationKey.String("charge"), telemetry.AlgorithmKey.String("token-bucket")}, 2},
		{[]attribute.KeyValue{telemetry.ResultKey.String("denied"), telemetry.OperationKey.String("charge")}, 2},
		{[]attribute.KeyValue{telemetry.ResultKey.String("denied"), telemetry.OperationKey.String("peek")}, 1},
		{[]attribute.KeyValue{telemetry.ResultKey.String("allowed"), telemetry.OperationKey.String("refund")}, 1},
		{[]attribute.KeyValue{telemetry.ResultKey.String("allowed"), telemetry.OperationKey.String("reserve")}, 1},
		{[]attribute.KeyValue{telemetry.ResultKey.String("allowed"), telemetry.AlgorithmKey.String("gcra")}, 1},
		{[]attribute.KeyValue{telemetry.ResultKey.String("error")}, 0},
	} {
		a := append(append([]attribute.KeyValue(nil), base...), c.attrs...)
		if got := value(t, ms, "ratelimit.decisions", a...); got != c.want {
			t.Errorf("ratelimit.decisions%v = %v, want %v", c.attrs, got, c.want)
		}
		if got := value(t, ms, "ratelimit.decision.duration", a...); got != c.want {
			t.Errorf("ratelimit.decision.duration%v count = %v, want %v", c.attrs, got, c.want)
		}
	}
	// "Allow 2" and the reservation left 0 of 3: near the limit; "Allow
	// 1" left 2 of 3: not; the refund never counts.
	if got := value(t, ms, "ratelimit.near_limit", base...); got != 2 {
		t.Errorf("ratelimit.near_limit = %v, want 2", got)
	}
	for name, m := range ms {
		want := map[string]string{
			"ratelimit.decisions":         "{decision}",
			"ratelimit.decision.duration": "s",
			"ratelimit.near_limit":        "{decision}",
		}[name]
		if m.Unit != want || m.Description == "" {
			t.Errorf("%s: unit %q, want %q; description %q", name, m.Unit, want, m.Description)
		}
	}
}

// TestRetryAfter checks the retry-after attribute's unit: seconds.
func TestRetryAfter(t *testing.T) {
	t.Parallel()
	h := newHarness(t, newMem(t))
	limit := core.PerMinute(2) // a token every 30 s
	r := core.Request{Key: "k1234", Cost: 2, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: limit, Now: t0}}
	if _, err := h.store.Apply(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	r.Cost = 1
	if d, _ := h.store.Apply(context.Background(), r); d.Allowed || d.RetryAfter != 30*time.Second {
		t.Fatalf("Apply = %+v, want a denial for 30s", d)
	}
	spans := h.ended()
	got := attrs(t, spans[1])[telemetry.RetryAfterKey]
	if got != attribute.Float64Value(30) {
		t.Errorf("retry_after = %v, want 30 (seconds)", got.String())
	}
	if _, ok := attrs(t, spans[1])[telemetry.LimiterKey]; ok {
		t.Errorf("ratelimit.limiter present without WithName")
	}
}

// TestSources checks that a decision from every source is marked on its
// span and in the decisions counter, and that none is an error: the
// failure policies (fail-open, fail-closed, degraded) decide while the
// store is down, and their decisions are values.
func TestSources(t *testing.T) {
	t.Parallel()
	for src := core.SourceStore; src <= core.SourceDenyList; src++ {
		t.Run(src.String(), func(t *testing.T) {
			t.Parallel()
			allowed := src != core.SourceFailClosed && src != core.SourceCache && src != core.SourceDenyList
			inner := stores.Func(func(_ context.Context, req core.Request) (core.Decision, error) {
				d := core.Decision{Allowed: allowed, Limit: 10, Remaining: 5, Source: src}
				if !allowed {
					d.Remaining, d.RetryAfter = 0, time.Second
				}
				return d, nil
			})
			h := newHarness(t, inner, telemetry.WithName("src"))
			req := core.Request{Key: "user:7", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.GCRA, Limit: core.PerSecond(10)}}
			d, err := h.store.Apply(context.Background(), req)
			if err != nil || d.Source != src {
				t.Fatalf("Apply = %+v, %v", d, err)
			}
			s := h.onlySpan(t)
			checkDecisionSpan(t, src.String(), s, s.Status().Code, codes.Unset)
			checkAttrs(t, src.String(), s, wantDecision("src", "func", req, d))
			result := "denied"
			if allowed {
				result = "allowed"
			}
			ms := h.collect(t)
			if got := value(t, ms, "ratelimit.decisions", telemetry.SourceKey.String(src.String()), telemetry.ResultKey.String(result)); got != 1 {
				t.Errorf("ratelimit.decisions{source=%s,result=%s} = %v, want 1", src, result, got)
			}
			if _, ok := ms["ratelimit.store.errors"]; ok {
				t.Errorf("a %s decision counted as a store error", src)
			}
		})
	}
	t.Run("unknown", func(t *testing.T) {
		t.Parallel()
		inner := stores.Func(func(context.Context, core.Request) (core.Decision, error) {
			return core.Decision{Allowed: true, Limit: 1, Source: core.Source(200)}, nil
		})
		h := newHarness(t, inner)
		h.store.Apply(context.Background(), core.Request{Key: "user:7", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.GCRA, Limit: core.PerSecond(10)}})
		if got := attrs(t, h.onlySpan(t))[telemetry.SourceKey]; got != attribute.StringValue("other") {
			t.Errorf("source = %v, want other", got.String())
		}
	})
}

// TestFailures checks the failures of requests and stores: the span's
// status is Error with the error recorded and error.type set, and the
// decisions and store errors counters count it.
func TestFailures(t *testing.T) {
	t.Parallel()
	dead := errors.New("backend down")
	cases := []struct {
		name    string
		inner   core.Store
		req     core.Request
		ctx     func() (context.Context, context.CancelFunc)
		errType string
	}{
		{"empty key", nil, core.Request{Cost: 1, Terms: &core.Terms{Algorithm: algorithms.GCRA, Limit: core.PerSecond(1)}}, nil, "invalid_request"},
		{"negative cost", nil, core.Request{Key: "user:1", Cost: -1, Terms: &core.Terms{Algorithm: algorithms.GCRA, Limit: core.PerSecond(1)}}, nil, "invalid_request"},
		{"no algorithm", nil, core.Request{Key: "user:1", Cost: 1, Terms: &core.Terms{Limit: core.PerSecond(1)}}, nil, "invalid_request"},
		{"invalid limit", nil, core.Request{Key: "user:1", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.GCRA}}, nil, "invalid_request"},
		{"unknown operation", nil, core.Request{Key: "user:1", Cost: 1, Op: core.OpAtMost + 1, Terms: &core.Terms{Algorithm: algorithms.GCRA, Limit: core.PerSecond(1)}}, nil, "invalid_request"},
		{"max wait on a charge", nil, core.Request{Key: "user:1", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.GCRA, Limit: core.PerSecond(1), MaxWait: time.Second}}, nil, "invalid_request"},
		{"reservation unsupported", nil, core.Request{Key: "user:1", Cost: 1, Op: core.OpReserve, Terms: &core.Terms{Algorithm: algorithms.FixedWindow, Limit: core.PerSecond(1), MaxWait: time.Second}}, nil, "unsupported"},
		{"store error", stores.Func(func(context.Context, core.Request) (core.Decision, error) {
			return core.Decision{}, fmt.Errorf("fake: %w", dead)
		}), core.Request{Key: "user:1", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.GCRA, Limit: core.PerSecond(1)}}, nil, "*errors.errorString"},
		{"deadline", stores.Func(func(ctx context.Context, _ core.Request) (core.Decision, error) {
			<-ctx.Done()
			return core.Decision{}, fmt.Errorf("fake: %w", ctx.Err())
		}), core.Request{Key: "user:1", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.GCRA, Limit: core.PerSecond(1)}}, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Millisecond)
		}, "timeout"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			inner := c.inner
			if inner == nil {
				inner = newMem(t)
			}
			h := newHarness(t, inner, telemetry.WithName("f"))
			ctx := context.Background()
			if c.ctx != nil {
				var cancel context.CancelFunc
				ctx, cancel = c.ctx()
				defer cancel()
			}
			_, err := h.store.Apply(ctx, c.req)
			if err == nil {
				t.Fatal("Apply succeeded, want an error")
			}
			s := h.onlySpan(t)
			checkDecisionSpan(t, c.name, s, s.Status().Code, codes.Error)
			if s.Status().Description != err.Error() {
				t.Errorf("status description %q, want %q", s.Status().Description, err.Error())
			}
			a := attrs(t, s)
			if a[telemetry.ErrorTypeKey] != attribute.StringValue(c.errType) {
				t.Errorf("error.type = %v, want %s", a[telemetry.ErrorTypeKey].String(), c.errType)
			}
			for _, k := range []attribute.Key{telemetry.AllowedKey, telemetry.RemainingKey, telemetry.SourceKey} {
				if _, ok := a[k]; ok {
					t.Errorf("a failed decision has %s", k)
				}
			}
			if ev := s.Events(); len(ev) != 1 || ev[0].Name != "exception" {
				t.Errorf("events %v, want one exception", ev)
			}
			ms := h.collect(t)
			if got := value(t, ms, "ratelimit.decisions", telemetry.ResultKey.String("error")); got != 1 {
				t.Errorf("ratelimit.decisions{result=error} = %v, want 1", got)
			}
			if got := value(t, ms, "ratelimit.store.errors", telemetry.ErrorTypeKey.String(c.errType), telemetry.LimiterKey.String("f")); got != 1 {
				t.Errorf("ratelimit.store.errors{error.type=%s} = %v, want 1", c.errType, got)
			}
		})
	}
}

// TestKeys checks the three key modes: absent by default, an HMAC of fixed
// length under WithKeyHash, raw only under WithRawKey; and that an error
// quoting the key has it replaced on the span unless the raw key is asked
// for.
func TestKeys(t *testing.T) {
	t.Parallel()
	secret := []byte("a secret of 32 bytes, or so.....")
	mac := func(key string) string {
		m := hmac.New(sha256.New, secret)
		m.Write([]byte(key))
		return hex.EncodeToString(m.Sum(nil)[:16])
	}
	hexRE := regexp.MustCompile(`^[0-9a-f]{32}$`)
	keys := []string{"user:1", "203.0.113.7", "2001:db8::1", "ünïcødé", string(make([]byte, core.MaxKeyLen))}
	cases := []struct {
		name string
		opts []telemetry.Option
		want func(key string) (attribute.KeyValue, bool)
	}{
		{"default", nil, func(string) (attribute.KeyValue, bool) { return attribute.KeyValue{}, false }},
		{"hash", []telemetry.Option{telemetry.WithKeyHash(secret)}, func(k string) (attribute.KeyValue, bool) {
			return telemetry.KeyHashKey.String(mac(k)), true
		}},
		{"raw", []telemetry.Option{telemetry.WithRawKey()}, func(k string) (attribute.KeyValue, bool) {
			return telemetry.KeyKey.String(k), true
		}},
		{"raw then hash", []telemetry.Option{telemetry.WithRawKey(), telemetry.WithKeyHash(secret)}, func(k string) (attribute.KeyValue, bool) {
			return telemetry.KeyHashKey.String(mac(k)), true
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fail := false
			inner := stores.Func(func(_ context.Context, req core.Request) (core.Decision, error) {
				if fail {
					return core.Decision{}, fmt.Errorf("fake: no room for %q (key %s)", req.Key, req.Key)
				}
				return core.Decision{Allowed: true, Limit: 1}, nil
			})
			h := newHarness(t, inner, c.opts...)
			for _, fail = range []bool{false, true} {
				for _, key := range keys {
					_, err := h.store.Apply(context.Background(), core.Request{Key: key, Cost: 1, Terms: &core.Terms{Algorithm: algorithms.GCRA, Limit: core.PerSecond(1)}})
					s := h.onlySpan(t)
					a := attrs(t, s)
					want, ok := c.want(key)
					for _, k := range []attribute.Key{telemetry.KeyKey, telemetry.KeyHashKey} {
						got, present := a[k]
						switch {
						case ok && k == want.Key && (!present || got != want.Value):
							t.Errorf("%s = %q, want %q", k, got.String(), want.Value.String())
						case (!ok || k != want.Key) && present:
							t.Errorf("%s present: %q", k, got.String())
						}
					}
					if h, ok := a[telemetry.KeyHashKey]; ok && !hexRE.MatchString(h.AsString()) {
						t.Errorf("key hash %q is not 32 hex digits", h.AsString())
					}
					if !fail {
						continue
					}
					desc := s.Status().Description
					msg := s.Events()[0].Attributes
					if c.name == "raw" {
						if desc != err.Error() {
							t.Errorf("raw: status %q, want %q", desc, err.Error())
						}
						continue
					}
					wantDesc := fmt.Sprintf("fake: no room for %q (key %s)", "[key]", "[key]")
					if fmt.Sprintf("%q", key) != `"`+key+`"` { // the key is quoted with escapes: only the bare one is replaced
						wantDesc = fmt.Sprintf("fake: no room for %q (key %s)", key, "[key]")
					}
					if desc != wantDesc {
						t.Errorf("status %q, want %q", desc, wantDesc)
					}
					for _, kv := range msg {
						if kv.Value.Type() == attribute.STRING && len(key) > 3 && containsKey(kv.Value.AsString(), key) {
							t.Errorf("exception event %s = %q holds the key", kv.Key, kv.Value.AsString())
						}
					}
				}
			}
		})
	}
}

func containsKey(s, key string) bool {
	return len(key) > 0 && len(s) >= len(key) && regexp.MustCompile(regexp.QuoteMeta(key)).MatchString(s)
}

// TestNearLimit checks that the near-limit counter counts what a policy
// below marked (policy.WithNearLimit), at its fraction, and nothing
// without one.
func TestNearLimit(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		fraction float64 // 0: no policy
		want     float64
	}{
		{"0.1", 0.1, 1}, // remaining 0 of 10
		{"0.5", 0.5, 5}, // remaining 4, 3, 2, 1, 0
		{"no policy", 0, 0},
		{"1", 1, 10}, // every admission leaves less than all
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var inner core.Store = newMem(t)
			if c.fraction > 0 {
				inner = nearAt(t, inner, c.fraction)
			}
			h := newHarness(t, inner)
			for range 12 { // 10 admitted, 2 denied
				h.store.Apply(context.Background(), core.Request{Key: "user:1", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerMinute(10), Now: t0}})
			}
			// Peeks never count.
			h.store.Apply(context.Background(), core.Request{Key: "user:2", Cost: 1, Op: core.OpPeek, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerMinute(1), Now: t0}})
			if got := value(t, h.collect(t), "ratelimit.near_limit"); got != c.want {
				t.Errorf("ratelimit.near_limit = %v, want %v", got, c.want)
			}
		})
	}
}

// fakeBreaker is a store with a circuit breaker's reporting methods, in
// front of another store.
type fakeBreaker struct {
	inner   core.Store
	mu      sync.Mutex
	state   string
	changes uint64
}

func (b *fakeBreaker) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	return b.inner.Apply(ctx, req)
}
func (b *fakeBreaker) ApplyAll(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	return b.inner.ApplyAll(ctx, reqs, out)
}
func (b *fakeBreaker) Reset(ctx context.Context, key string, alg core.Algorithm) error {
	return b.inner.Reset(ctx, key, alg)
}
func (b *fakeBreaker) Close() error       { return b.inner.Close() }
func (b *fakeBreaker) Unwrap() core.Store { return b.inner }
func (b *fakeBreaker) BreakerState() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}
func (b *fakeBreaker) BreakerChanges() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.changes
}
func (b *fakeBreaker) set(state string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.state = state
	b.changes++
}

// passthrough is a decorator that only forwards, to put a layer between
// the telemetry decorator and a breaker.
type passthrough struct{ inner core.Store }

func (p passthrough) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	return p.inner.Apply(ctx, req)
}
func (p passthrough) ApplyAll(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	return p.inner.ApplyAll(ctx, reqs, out)
}
func (p passthrough) Reset(ctx context.Context, key string, alg core.Algorithm) error {
	return p.inner.Reset(ctx, key, alg)
}
func (p passthrough) Close() error       { return p.inner.Close() }
func (p passthrough) Unwrap() core.Store { return p.inner }

// TestBreaker checks that a breaker found down the chain puts its state
// on spans and in the observable instruments, and that Close unregisters
// them.
func TestBreaker(t *testing.T) {
	t.Parallel()
	b := &fakeBreaker{inner: newMem(t), state: "closed"}
	h := newHarness(t, passthrough{b}, telemetry.WithName("br"))
	req := core.Request{Key: "user:1", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.GCRA, Limit: core.PerSecond(100)}}
	check := func(state string, changes float64) {
		t.Helper()
		h.store.Apply(context.Background(), req)
		if got := attrs(t, h.onlySpan(t))[telemetry.BreakerStateKey]; got != attribute.StringValue(state) {
			t.Errorf("span breaker state %v, want %s", got.String(), state)
		}
		ms := h.collect(t)
		for _, s := range []string{"closed", "half-open", "open"} {
			want := 0.0
			if s == state {
				want = 1
			}
			if got := value(t, ms, "ratelimit.breaker.state", telemetry.BreakerStateKey.String(s), telemetry.LimiterKey.String("br"), telemetry.StoreKey.String("memstore")); got != want {
				t.Errorf("ratelimit.breaker.state{state=%s} = %v, want %v", s, got, want)
			}
		}
		if got := value(t, ms, "ratelimit.breaker.changes", telemetry.LimiterKey.String("br")); got != changes {
			t.Errorf("ratelimit.breaker.changes = %v, want %v", got, changes)
		}
	}
	check("closed", 0)
	b.set("open")
	check("open", 1)
	b.set("half-open")
	check("half-open", 2)
	b.set("closed")
	check("closed", 3)

	if err := h.store.Close(); err != nil {
		t.Fatal(err)
	}
	ms := h.collect(t)
	for _, name := range []string{"ratelimit.breaker.state", "ratelimit.breaker.changes"} {
		if m, ok := ms[name]; ok && len(points(t, m)) > 0 {
			t.Errorf("%s still observed after Close", name)
		}
	}
}

// TestNoBreaker checks that a chain without a breaker has no breaker
// attribute and no breaker instruments.
func TestNoBreaker(t *testing.T) {
	t.Parallel()
	h := newHarness(t, passthrough{newMem(t)})
	h.store.Apply(context.Background(), core.Request{Key: "user:1", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.GCRA, Limit: core.PerSecond(100)}})
	if _, ok := attrs(t, h.onlySpan(t))[telemetry.BreakerStateKey]; ok {
		t.Error("breaker state on a span without a breaker")
	}
	if _, ok := h.collect(t)["ratelimit.breaker.state"]; ok {
		t.Error("breaker instruments without a breaker")
	}
}

// TestDecorator checks the decorator contract: Reset forwards (in a span),
// Unwrap returns the inner store, Close closes it, and calls after Close
// fail with ErrClosed.
func TestDecorator(t *testing.T) {
	t.Parallel()
	mem := newMem(t)
	h := newHarness(t, mem, telemetry.WithKeyHash([]byte("0123456789abcdef")))
	if h.store.Unwrap() != core.Store(mem) {
		t.Error("Unwrap is not the inner store")
	}
	ctx := context.Background()
	req := core.Request{Key: "user:1", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerMinute(1), Now: t0}}
	if d, _ := h.store.Apply(ctx, req); !d.Allowed {
		t.Fatal("first Apply denied")
	}
	if d, _ := h.store.Apply(ctx, req); d.Allowed {
		t.Fatal("second Apply admitted")
	}
	h.ended()
	if err := h.store.Reset(ctx, "user:1", algorithms.TokenBucket); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	s := h.onlySpan(t)
	if s.Name() != telemetry.ResetSpanName || s.Status().Code != codes.Unset {
		t.Errorf("Reset span %q status %v", s.Name(), s.Status())
	}
	a := attrs(t, s)
	if a[telemetry.AlgorithmKey] != attribute.StringValue("token-bucket") || a[telemetry.KeyHashKey].AsString() == "" {
		t.Errorf("Reset span attributes %v", s.Attributes())
	}
	if d, _ := h.store.Apply(ctx, req); !d.Allowed {
		t.Error("Apply after Reset denied")
	}
	if err := h.store.Reset(ctx, "", algorithms.TokenBucket); !errors.Is(err, core.ErrInvalidKey) {
		t.Errorf("Reset(\"\") = %v, want ErrInvalidKey", err)
	}
	h.ended()

	if err := h.store.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := mem.Apply(ctx, req); !errors.Is(err, core.ErrClosed) {
		t.Errorf("inner Apply after Close = %v, want ErrClosed", err)
	}
	if _, err := h.store.Apply(ctx, req); !errors.Is(err, core.ErrClosed) {
		t.Errorf("Apply after Close = %v, want ErrClosed", err)
	}
	if err := h.store.Reset(ctx, "user:1", algorithms.TokenBucket); !errors.Is(err, core.ErrClosed) {
		t.Errorf("Reset after Close = %v, want ErrClosed", err)
	}
	if err := h.store.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}

	// A store without Reset.
	f := newHarness(t, stores.Func(func(context.Context, core.Request) (core.Decision, error) { return core.Decision{}, nil }))
	if err := f.store.Reset(ctx, "user:1", algorithms.GCRA); !errors.Is(err, core.ErrUnsupported) {
		t.Errorf("Reset on a StoreFunc = %v, want ErrUnsupported", err)
	}
	if err := f.store.Close(); err != nil {
		t.Errorf("Close of a decorator over a StoreFunc = %v", err)
	}
}

// TestConformance runs the store conformance suite through the decorator:
// it changes no decision, batches included. The batch tests' spans show
// that their batches went through the decorator's ApplyAll.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) core.Store {
		m, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		h := newHarness(t, m)
		if name := t.Name()[strings.LastIndexByte(t.Name(), '/')+1:]; strings.HasPrefix(name, "Multi") {
			t.Cleanup(func() {
				batches := 0
				for _, s := range h.spans.Ended() {
					if _, ok := attrs(t, s)[telemetry.BatchSizeKey]; ok {
						batches++
					}
				}
				if batches == 0 && !t.Failed() {
					t.Errorf("%s: no batch span: the batches did not go through the decorator", name)
				}
			})
		}
		return h.store
	})
}

// TestOptions checks that bad options fail New with ErrInvalidOption.
func TestOptions(t *testing.T) {
	t.Parallel()
	mem := newMem(t)
	long := string(make([]byte, 65))
	cases := []struct {
		name string
		opt  telemetry.Option
		ok   bool
	}{
		{"name", telemetry.WithName("login"), true},
		{"empty name", telemetry.WithName(""), true},
		{"long name", telemetry.WithName(long), false},
		{"store name", telemetry.WithStoreName("redis-eu"), true},
		{"empty store name", telemetry.WithStoreName(""), false},
		{"long store name", telemetry.WithStoreName(long), false},
		{"hash", telemetry.WithKeyHash(make([]byte, telemetry.MinKeySecret)), true},
		{"short secret", telemetry.WithKeyHash(make([]byte, telemetry.MinKeySecret-1)), false},
		{"nil secret", telemetry.WithKeyHash(nil), false},
		{"nil providers", telemetry.WithTracerProvider(nil), true},
		{"nil option", nil, true},
	}
	for _, c := range cases {
		_, err := telemetry.New(mem, c.opt, telemetry.WithMeterProvider(noop.NewMeterProvider()))
		switch {
		case c.ok && err != nil:
			t.Errorf("%s: New = %v", c.name, err)
		case !c.ok && !errors.Is(err, telemetry.ErrInvalidOption):
			t.Errorf("%s: New = %v, want ErrInvalidOption", c.name, err)
		}
	}
	if _, err := telemetry.New(nil); !errors.Is(err, core.ErrNoStore) {
		t.Errorf("New(nil) = %v, want ErrNoStore", err)
	}
}

// customStore is a backend of this test package.
type customStore struct{ core.Store }

// TestStoreName checks the ratelimit.store attribute's default, found at
// the end of the chain, and WithStoreName.
func TestStoreName(t *testing.T) {
	t.Parallel()
	mem := newMem(t)
	fn := stores.Func(func(context.Context, core.Request) (core.Decision, error) { return core.Decision{Allowed: true}, nil })
	cases := []struct {
		inner core.Store
		opts  []telemetry.Option
		want  string
	}{
		{mem, nil, "memstore"},
		{passthrough{passthrough{mem}}, nil, "memstore"},
		{&fakeBreaker{inner: mem, state: "closed"}, nil, "memstore"},
		{fn, nil, "func"},
		{customStore{fn}, nil, "telemetry_test"},
		{mem, []telemetry.Option{telemetry.WithStoreName("cache-eu")}, "cache-eu"},
	}
	for _, c := range cases {
		h := newHarness(t, c.inner, c.opts...)
		h.store.Apply(context.Background(), core.Request{Key: "user:1", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.GCRA, Limit: core.PerSecond(100)}})
		if got := attrs(t, h.onlySpan(t))[telemetry.StoreKey]; got != attribute.StringValue(c.want) {
			t.Errorf("%T: store %v, want %s", c.inner, got.String(), c.want)
		}
	}
}

// renamed is an algorithm under another name.
type renamed struct {
	core.Algorithm
	name string
}

func (r renamed) Name() string { return r.name }

// peekIf returns OpPeek if peek is true, OpCharge otherwise.
func peekIf(peek bool) core.Op {
	if peek {
		return core.OpPeek
	}
	return core.OpCharge
}

// TestConcurrentSafe decides from many goroutines, over more algorithm
// names than the decorator keeps attribute sets for, and checks that every
// decision is counted once and the series stay bounded.
func TestConcurrentSafe(t *testing.T) {
	t.Parallel()
	h := newHarness(t, newMem(t), telemetry.WithKeyHash([]byte("0123456789abcdef")))
	const goroutines, per, names = 16, 200, 24
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range per {
				alg := renamed{algorithms.GCRA, fmt.Sprintf("gcra-%d", (g+i)%names)}
				h.store.Apply(context.Background(), core.Request{Key: fmt.Sprintf("user:%d", i), Cost: 1, Op: peekIf(i%5 == 0), Terms: &core.Terms{Algorithm: alg, Limit: core.PerSecond(1000)}})
			}
		})
	}
	wg.Wait()
	if n := len(h.ended()); n != goroutines*per {
		t.Errorf("%d spans, want %d", n, goroutines*per)
	}
	ms := h.collect(t)
	var total float64
	algs := map[string]bool{}
	for _, p := range points(t, ms["ratelimit.decisions"]) {
		total += p.value
		v, _ := p.attrs.Value(telemetry.AlgorithmKey)
		algs[v.AsString()] = true
	}
	if total != goroutines*per {
		t.Errorf("ratelimit.decisions sums to %v, want %d", total, goroutines*per)
	}
	if len(algs) != 17 || !algs["_OTHER"] {
		t.Errorf("algorithms in metrics: %d (%v), want 16 and _OTHER", len(algs), algs)
	}
}

// TestNoopZeroAllocs checks that with the API's no-op providers the
// decorator allocates nothing per decision. (Not parallel: AllocsPerRun
// counts every goroutine's allocations.)
func TestNoopZeroAllocs(t *testing.T) {
	s, err := telemetry.New(newMem(t), telemetry.WithTracerProvider(tracenoop.NewTracerProvider()), telemetry.WithMeterProvider(noop.NewMeterProvider()), telemetry.WithName("n"))
	if err != nil {
		t.Fatal(err)
	}
	checkZeroAllocs(t, context.Background(), s)
}

// TestSpanRule checks which decisions have a span: by default those
// made under a span that is sampled or records, local or remote, each
// as its child; none outside a trace or in a trace not sampled, where
// an SDK's tracer costs no allocation; with WithRootSpans every decision,
// as its sampler decides. Reset follows the same rule. (Not parallel:
// AllocsPerRun counts every goroutine's allocations.)
func TestSpanRule(t *testing.T) {
	h := newProviders(t)
	s, err := telemetry.New(newMem(t), telemetry.WithTracerProvider(h.tp), telemetry.WithMeterProvider(noop.NewMeterProvider()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	dropped := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	t.Cleanup(func() { dropped.Shutdown(context.Background()) })
	unsampled, _ := dropped.Tracer("caller").Start(context.Background(), "handler")
	sampled, parent := h.tp.Tracer("caller").Start(context.Background(), "handler")
	remote := trace.ContextWithRemoteSpanContext(context.Background(), parent.SpanContext())
	req := core.Request{Key: "user:1", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(10)}}
	for _, c := range []struct {
		name  string
		ctx   context.Context
		spans int
	}{
		{"outside a trace", context.Background(), 0},
		{"in a trace not sampled", unsampled, 0},
		{"under a sampled span", sampled, 2},
		{"under a sampled remote span", remote, 2},
	} {
		h.spans.Reset()
		if _, err := s.Apply(c.ctx, req); err != nil {
			t.Fatal(err)
		}
		if err := s.Reset(c.ctx, req.Key, req.Algorithm); err != nil {
			t.Fatal(err)
		}
		ended := h.ended()
		if len(ended) != c.spans {
			t.Fatalf("%s: %d spans, want %d", c.name, len(ended), c.spans)
		}
		for _, sp := range ended {
			if sp.Parent().SpanID() != parent.SpanContext().SpanID() {
				t.Errorf("%s: span %s's parent is %v, want the caller's %v", c.name, sp.Name(), sp.Parent().SpanID(), parent.SpanContext().SpanID())
			}
		}
		if c.spans == 0 {
			checkZeroAllocs(t, c.ctx, s)
		}
	}

	h.wrap(t, newMem(t)) // WithRootSpans
	if _, err := h.store.Apply(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if sp := h.onlySpan(t); sp.Parent().IsValid() {
		t.Errorf("WithRootSpans, outside a trace: the span has parent %v, want a root", sp.Parent().SpanID())
	}
}

// checkZeroAllocs checks that a decision through the decorator s under
// ctx allocates nothing, and that a batch allocates no more than the
// inner store's own ApplyAll does.
func checkZeroAllocs(t testing.TB, ctx context.Context, s *telemetry.Store) {
	t.Helper()
	req := core.Request{Key: "user:1", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(1_000_000_000)}}
	s.Apply(ctx, req) // the key's first decision makes its state
	if n := testing.AllocsPerRun(1000, func() { s.Apply(ctx, req) }); n != 0 {
		t.Errorf("%v allocations per decision, want 0", n)
	}

	reqs := []core.Request{
		{Key: "user:1", Cost: 1, Terms: &core.Terms{Algorithm: core.Named(algorithms.TokenBucket, "user"), Limit: core.PerSecond(1_000_000_000)}},
		{Key: "tenant:1", Cost: 1, Terms: &core.Terms{Algorithm: core.Named(algorithms.GCRA, "tenant"), Limit: core.PerSecond(1_000_000_000)}},
		{Key: "all", Cost: 1, Terms: &core.Terms{Algorithm: core.Named(algorithms.FixedWindow, "global"), Limit: core.PerSecond(1_000_000_000)}},
	}
	out := make([]core.Decision, len(reqs))
	batch := func(st core.Store) func() {
		return func() {
			if err := st.ApplyAll(ctx, reqs, out); err != nil {
				t.Fatal(err)
			}
		}
	}
	batch(s)() // the keys' first decisions make their states
	inner := testing.AllocsPerRun(1000, batch(s.Unwrap()))
	if n := testing.AllocsPerRun(1000, batch(s)); n != inner {
		t.Errorf("%v allocations per batch, want the inner store's %v", n, inner)
	}
}
