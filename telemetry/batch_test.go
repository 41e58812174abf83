package telemetry_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores"
	"github.com/sluicehq/sluice/stores/memstore"
	"github.com/sluicehq/sluice/stores/storetest"
	"github.com/sluicehq/sluice/telemetry"
)

// newClockedMem returns a memory store whose clock stands at t0, closed
// when the test ends.
func newClockedMem(t testing.TB) *memstore.Store {
	t.Helper()
	m, err := memstore.New(memstore.Config{Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// total returns the sum of m's data points whose attributes include every
// one of want (the counts, for a histogram).
func total(t testing.TB, ms map[string]metricdata.Metrics, name string, want ...attribute.KeyValue) float64 {
	t.Helper()
	var sum float64
	if m, ok := ms[name]; ok {
		for _, p := range points(t, m) {
			if hasAll(p.attrs, want) {
				sum += p.value
			}
		}
	}
	return sum
}

// threeRules are a stack's rules: a user's, their tenant's and everyone's.
var threeRules = []sluice.Rule{
	{Name: "user", Algorithm: algorithms.TokenBucket, Limit: core.PerMinute(5)},
	{Name: "tenant", Algorithm: algorithms.GCRA, Limit: core.PerMinute(3)},
	{Name: "global", Algorithm: algorithms.FixedWindow, Limit: core.PerMinute(100)},
}

// ruleRequest returns the request a stack makes of rule r for key.
func ruleRequest(r sluice.Rule, key string, op core.Op) core.Request {
	return core.Request{Key: key, Cost: 1, Op: op, Terms: &core.Terms{Algorithm: core.Named(r.Algorithm, r.Name), Limit: r.Limit}}
}

// wantBatch returns the attributes of a batch's span: the binding
// request's decision attributes, with the verdict's outcome and delay,
// and the batch's.
func wantBatch(limiter string, reqs []core.Request, v sluice.Verdict) map[attribute.Key]attribute.Value {
	want := wantDecision(limiter, "memstore", reqs[v.Binding], v.Decision)
	algs := make([]string, len(reqs))
	allowed := make([]bool, len(reqs))
	remaining := make([]int64, len(reqs))
	for i := range reqs {
		algs[i], allowed[i], remaining[i] = reqs[i].Algorithm.Name(), v.Rules()[i].Allowed, v.Rules()[i].Remaining
	}
	for _, kv := range []attribute.KeyValue{
		telemetry.BatchSizeKey.Int(len(reqs)),
		telemetry.BindingKey.Int(v.Binding),
		telemetry.BatchAlgorithmsKey.StringSlice(algs),
		telemetry.BatchAllowedKey.BoolSlice(allowed),
		telemetry.BatchRemainingKey.Int64Slice(remaining),
	} {
		want[kv.Key] = kv.Value
	}
	return want
}

// TestStackSpan decides a three-rule stack through the decorator: each
// decision, a denial included, is one span with the binding rule's
// attributes and every rule's outcome, status Unset; each rule's decision
// is counted under its own algorithm, the duration once per decision
// under the binding rule's, and near-limit only in admitted batches.
func TestStackSpan(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nearAt(t, newClockedMem(t), 0.7), telemetry.WithName("stack"))
	stack, err := sluice.NewStack(h.store, threeRules...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	steps := []struct {
		user      string
		binding   int
		allowed   []bool
		remaining []int64
	}{
		// The tenant's 3 a minute bind: it is the closest to its limit,
		// then the one that denies.
		{"u1", 1, []bool{true, true, true}, []int64{4, 2, 99}},
		{"u1", 1, []bool{true, true, true}, []int64{3, 1, 98}},
		{"u2", 1, []bool{true, true, true}, []int64{4, 0, 97}},
		{"u2", 1, []bool{true, false, true}, []int64{3, 0, 96}}, // what u2 and everyone would have left
	}
	for i, st := range steps {
		what := fmt.Sprintf("step %d: Allow(%s, t1, all)", i, st.user)
		v, err := stack.Allow(ctx, st.user, "t1", "all")
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		wantAllowed := !strings.Contains(fmt.Sprint(st.allowed), "false")
		if v.Allowed != wantAllowed || v.Binding != st.binding {
			t.Errorf("%s = allowed %v binding %d, want %v %d", what, v.Allowed, v.Binding, wantAllowed, st.binding)
		}
		s := h.onlySpan(t)
		checkDecisionSpan(t, what, s, s.Status().Code, codes.Unset)
		if len(s.Events()) != 0 {
			t.Errorf("%s: %d events, want none", what, len(s.Events()))
		}
		reqs := make([]core.Request, len(threeRules))
		for j, key := range []string{st.user, "t1", "all"} {
			reqs[j] = ruleRequest(threeRules[j], key, core.OpCharge)
		}
		checkAttrs(t, what, s, wantBatch("stack", reqs, v))
		// The table's literals, so that the check above does not merely
		// agree with the verdict.
		a := attrs(t, s)
		if got, want := a[telemetry.BatchAllowedKey], attribute.BoolSliceValue(st.allowed); got != want {
			t.Errorf("%s: batch.allowed %s, want %s", what, got.String(), want.String())
		}
		if got, want := a[telemetry.BatchRemainingKey], attribute.Int64SliceValue(st.remaining); got != want {
			t.Errorf("%s: batch.remaining %s, want %s", what, got.String(), want.String())
		}
		if got := a[telemetry.AllowedKey]; got != attribute.BoolValue(wantAllowed) {
			t.Errorf("%s: allowed %s, want %v", what, got.String(), wantAllowed)
		}
		if got := a[telemetry.AlgorithmKey]; got != attribute.StringValue("gcra/tenant") {
			t.Errorf("%s: algorithm %s, want the binding rule's, gcra/tenant", what, got.String())
		}
	}

	ms := h.collect(t)
	base := []attribute.KeyValue{telemetry.LimiterKey.String("stack"), telemetry.StoreKey.String("memstore"), telemetry.OperationKey.String("charge")}
	for _, c := range []struct {
		alg, result        string
		decisions, timings float64
	}{
		{"token-bucket/user", "allowed", 4, 0},
		{"token-bucket/user", "denied", 0, 0},
		{"gcra/tenant", "allowed", 3, 3},
		{"gcra/tenant", "denied", 1, 1},
		{"fixed-window/global", "allowed", 4, 0},
		{"fixed-window/global", "denied", 0, 0},
	} {
		a := append([]attribute.KeyValue{telemetry.AlgorithmKey.String(c.alg), telemetry.ResultKey.String(c.result)}, base...)
		if got := value(t, ms, "ratelimit.decisions", a...); got != c.decisions {
			t.Errorf("ratelimit.decisions{%s, %s} = %v, want %v", c.alg, c.result, got, c.decisions)
		}
		if got := value(t, ms, "ratelimit.decision.duration", a...); got != c.timings {
			t.Errorf("ratelimit.decision.duration{%s, %s} count = %v, want %v", c.alg, c.result, got, c.timings)
		}
	}
	// Under 0.7 of the limit: the tenant after each admission (2, 1 and 0
	// of 3 left) and u1 after its second (3 of 5). The denied batch's
	// user rule would have left 3 of 5, but charged nothing.
	for alg, want := range map[string]float64{"token-bucket/user": 1, "gcra/tenant": 3, "fixed-window/global": 0} {
		if got := value(t, ms, "ratelimit.near_limit", telemetry.AlgorithmKey.String(alg)); got != want {
			t.Errorf("ratelimit.near_limit{%s} = %v, want %v", alg, got, want)
		}
	}
	if _, ok := ms["ratelimit.store.errors"]; ok {
		t.Error("a denial counted as a store error")
	}

	// A peek is one span too, with the peek's operation.
	v, err := stack.Peek(ctx, "u1", "t1", "all")
	if err != nil || v.Allowed || v.Binding != 1 {
		t.Fatalf("Peek = %+v, %v; want a denial by the tenant", v, err)
	}
	reqs := []core.Request{
		ruleRequest(threeRules[0], "u1", core.OpPeek),
		ruleRequest(threeRules[1], "t1", core.OpPeek),
		ruleRequest(threeRules[2], "all", core.OpPeek),
	}
	s := h.onlySpan(t)
	checkDecisionSpan(t, "Peek", s, s.Status().Code, codes.Unset)
	checkAttrs(t, "Peek", s, wantBatch("stack", reqs, v))
}

// TestStackReservation reserves on a two-rule stack: the span's delay is
// the longest any rule needs, as the verdict's, and a denied reservation
// has none.
func TestStackReservation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, newClockedMem(t), telemetry.WithName("reserve"))
	rules := []sluice.Rule{
		{Name: "fast", Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(1)},
		{Name: "slow", Algorithm: algorithms.TokenBucket, Limit: core.Per(1, 2*time.Second)},
	}
	stack, err := sluice.NewStack(h.store, rules...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i, want := range []time.Duration{0, 2 * time.Second, 4 * time.Second, -1} {
		r, err := stack.ReserveN(ctx, []string{"k1", "k1"}, 1, 5*time.Second)
		if err != nil || r.OK() != (want >= 0) || want >= 0 && r.Delay != want {
			t.Fatalf("reservation %d = %+v, %v; want a delay of %v (-1: denied)", i, r, err, want)
		}
		s := h.onlySpan(t)
		checkDecisionSpan(t, "ReserveN", s, s.Status().Code, codes.Unset)
		reqs := make([]core.Request, len(rules))
		for j := range rules {
			reqs[j] = ruleRequest(rules[j], "k1", core.OpReserve)
			reqs[j].MaxWait = 5 * time.Second
		}
		wantAttrs := wantBatch("reserve", reqs, r.Verdict)
		if !r.OK() {
			// The fast rule would wait 3 s, the slow one more than 5 s:
			// the batch is denied, and a denial waits for nothing.
			if r.Binding != 1 || r.Rules()[1].Allowed || !r.Rules()[0].Allowed {
				t.Fatalf("reservation %d: binding rule %d, rules %+v; want rule 1 denying alone", i, r.Binding, r.Rules())
			}
			delete(wantAttrs, telemetry.DelayKey)
		}
		checkAttrs(t, fmt.Sprintf("reservation %d", i), s, wantAttrs)
		if i == 1 {
			// Both rules are spent (0 of 1); the slow one needs the longer
			// wait, so it binds, and the span says the batch waits 2 s.
			if r.Binding != 1 || r.Rules()[0].Delay != time.Second {
				t.Fatalf("binding rule %d, rules %+v; want rule 1, rule 0 with a delay of 1s", r.Binding, r.Rules())
			}
			a := attrs(t, s)
			if got := a[telemetry.DelayKey]; got != attribute.Float64Value(2) {
				t.Errorf("delay %s, want 2 (seconds)", got.String())
			}
			if got := a[telemetry.AlgorithmKey]; got != attribute.StringValue("token-bucket/slow") {
				t.Errorf("algorithm %s, want token-bucket/slow", got.String())
			}
		}
	}
	ms := h.collect(t)
	for result, want := range map[string]float64{"allowed": 7, "denied": 1} {
		if got := total(t, ms, "ratelimit.decisions", telemetry.OperationKey.String("reserve"), telemetry.ResultKey.String(result)); got != want {
			t.Errorf("ratelimit.decisions{reserve, %s} = %v, want %v (2 rules, 4 times)", result, got, want)
		}
	}
}

// TestBatchFailure checks failed batches: one span with status Error,
// error.type and the batch's size and algorithms but no outcome; one
// decision counted as an error, one store error and one duration; and
// no key of any request in the error's message on the span.
func TestBatchFailure(t *testing.T) {
	t.Parallel()
	// The user's key is part of the tenant's: both must be redacted,
	// the longer first.
	const userKey, tenantKey = "acme", "acme-tenant"
	busy := stores.Func(func(_ context.Context, req core.Request) (core.Decision, error) {
		if req.Key == tenantKey {
			return core.Decision{}, fmt.Errorf("backend: slot of %s is busy", req.Key)
		}
		return core.Decision{Allowed: true, Limit: 5, Remaining: 4}, nil
	})
	charge := func(key string) core.Request { return ruleRequest(threeRules[0], key, core.OpCharge) }
	cases := []struct {
		name    string
		inner   func(t *testing.T) core.Store
		reqs    []core.Request
		errType string
	}{
		{"store error", func(*testing.T) core.Store { return busy }, []core.Request{
			ruleRequest(threeRules[0], userKey, core.OpCharge),
			ruleRequest(threeRules[1], tenantKey, core.OpCharge),
			ruleRequest(threeRules[2], "all", core.OpCharge),
		}, "*errors.errorString"},
		{"mixed operations", func(t *testing.T) core.Store { return newMem(t) }, []core.Request{
			charge("alice"),
			ruleRequest(threeRules[1], "t1", core.OpPeek),
		}, "invalid_request"},
		{"same rule twice", func(t *testing.T) core.Store { return newMem(t) }, []core.Request{charge("alice"), charge("alice")}, "invalid_request"},
		{"no requests", func(t *testing.T) core.Store { return newMem(t) }, nil, "invalid_request"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, c.inner(t), telemetry.WithName("fail"))
			out := make([]core.Decision, len(c.reqs))
			err := h.store.ApplyAll(context.Background(), c.reqs, out)
			if err == nil {
				t.Fatal("ApplyAll succeeded, want an error")
			}
			s := h.onlySpan(t)
			checkDecisionSpan(t, c.name, s, s.Status().Code, codes.Error)
			a := attrs(t, s)
			if got := a[telemetry.ErrorTypeKey]; got != attribute.StringValue(c.errType) {
				t.Errorf("error.type %s, want %s (error %v)", got.String(), c.errType, err)
			}
			algs := []string{}
			for _, r := range c.reqs {
				algs = append(algs, r.Algorithm.Name())
			}
			if got := a[telemetry.BatchSizeKey]; got != attribute.IntValue(len(c.reqs)) {
				t.Errorf("batch.size %s, want %d", got.String(), len(c.reqs))
			}
			if got := a[telemetry.BatchAlgorithmsKey]; got != attribute.StringSliceValue(algs) {
				t.Errorf("batch.algorithms %s, want %v", got.String(), algs)
			}
			for _, k := range []attribute.Key{telemetry.AllowedKey, telemetry.BindingKey, telemetry.BatchAllowedKey, telemetry.BatchRemainingKey} {
				if _, ok := a[k]; ok {
					t.Errorf("a failed batch's span has %s", k)
				}
			}
			if ev := s.Events(); len(ev) != 1 || ev[0].Name != "exception" {
				t.Errorf("events %v, want one exception", ev)
			}
			desc := s.Status().Description
			for _, r := range c.reqs {
				if strings.Contains(desc, r.Key) {
					t.Errorf("status %q holds the key %q", desc, r.Key)
				}
			}
			if want := strings.ReplaceAll(err.Error(), tenantKey, "[key]"); desc != want {
				t.Errorf("status %q, want %q", desc, want)
			}
			ms := h.collect(t)
			if got := value(t, ms, "ratelimit.decisions", telemetry.ResultKey.String("error")); got != 1 {
				t.Errorf("ratelimit.decisions{error} = %v, want 1", got)
			}
			for _, result := range []string{"allowed", "denied"} {
				if got := value(t, ms, "ratelimit.decisions", telemetry.ResultKey.String(result)); got != 0 {
					t.Errorf("ratelimit.decisions{%s} = %v after a failure, want 0", result, got)
				}
			}
			if got := value(t, ms, "ratelimit.store.errors", telemetry.ErrorTypeKey.String(c.errType)); got != 1 {
				t.Errorf("ratelimit.store.errors = %v, want 1", got)
			}
			if got := value(t, ms, "ratelimit.decision.duration"); got != 1 {
				t.Errorf("ratelimit.decision.duration count = %v, want 1", got)
			}
		})
	}
}

// TestBatchClosed checks that ApplyAll after Close fails with ErrClosed.
func TestBatchClosed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, newMem(t))
	if err := h.store.Close(); err != nil {
		t.Fatal(err)
	}
	reqs := []core.Request{ruleRequest(threeRules[0], "a", core.OpCharge), ruleRequest(threeRules[1], "a", core.OpCharge)}
	if err := h.store.ApplyAll(context.Background(), reqs, make([]core.Decision, 2)); !errors.Is(err, core.ErrClosed) {
		t.Errorf("ApplyAll after Close = %v, want ErrClosed", err)
	}
}

// TestStackOneCall puts a call counter between the decorator and the
// backend: each decision of a three-rule stack reaches the backend as one
// ApplyAll, and a one-rule stack's as one Apply.
func TestStackOneCall(t *testing.T) {
	t.Parallel()
	counter := storetest.NewCounter(newMem(t))
	h := newHarness(t, counter)
	ctx := context.Background()
	stack, err := sluice.NewStack(h.store, threeRules...)
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	for range n {
		if _, err := stack.Allow(ctx, "u1", "t1", "all"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := stack.Peek(ctx, "u1", "t1", "all"); err != nil {
		t.Fatal(err)
	}
	if spans := h.ended(); len(spans) != n+1 {
		t.Errorf("%d spans, want %d", len(spans), n+1)
	}
	if apply, all, _ := counter.Counts(); apply != 0 || all != n+1 {
		t.Errorf("the backend saw %d Apply and %d ApplyAll calls, want 0 and %d", apply, all, n+1)
	}

	one, err := sluice.NewStack(h.store, threeRules[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := one.Allow(ctx, "u9"); err != nil {
		t.Fatal(err)
	}
	if apply, all, _ := counter.Counts(); apply != 1 || all != n+1 {
		t.Errorf("after a one-rule stack: %d Apply and %d ApplyAll calls, want 1 and %d", apply, all, n+1)
	}
	if _, ok := attrs(t, h.onlySpan(t))[telemetry.BatchSizeKey]; ok {
		t.Error("a single decision's span has ratelimit.batch.size")
	}
}
