package policy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores/memstore"
	"github.com/sluicehq/sluice/stores/storetest"
)

// t0 is the instant the batch tests decide at, so that nothing refills
// between their steps.
var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// Two rules, as a sluice.Stack names them: a per-user token bucket and a
// per-tenant GCRA.
var (
	userRule   = core.Named(algorithms.TokenBucket, "user")
	tenantRule = core.Named(algorithms.GCRA, "tenant")
	globalRule = core.Named(algorithms.FixedWindow, "global")
)

// batch returns a two-rule batch at t0: cost 1 of the user rule on user
// under 100 a minute, and of the tenant rule on tenant under tenantLimit.
func batch(user, tenant string, tenantLimit core.Limit) []core.Request {
	return []core.Request{
		{Key: user, Cost: 1, Terms: &core.Terms{Algorithm: userRule, Limit: core.PerMinute(100), Now: t0}},
		{Key: tenant, Cost: 1, Terms: &core.Terms{Algorithm: tenantRule, Limit: tenantLimit, Now: t0}},
	}
}

// modeSource is the source of each mode's answers.
var modeSource = map[Mode]core.Source{FailOpen: core.SourceFailOpen, FailClosed: core.SourceFailClosed, Degrade: core.SourceDegraded}

// withMode returns b itself for its own mode, else a view of it.
func withMode(t *testing.T, b *Breaker, m Mode) core.Store {
	t.Helper()
	if m == b.Mode() {
		return b
	}
	v, err := b.WithMode(m)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestBreakerBatchOneCall checks that a batch is one call of the store
// and of the circuit, whether the store answers or fails, through the
// breaker and through its views: Stats().Calls and the store's calls rise
// by one per batch, and the circuit counts one success or one failure.
func TestBreakerBatchOneCall(t *testing.T) {
	t.Parallel()
	for _, failing := range []bool{false, true} {
		for _, mode := range []Mode{FailOpen, FailClosed, Degrade} {
			t.Run(fmt.Sprintf("%v/failing=%v", mode, failing), func(t *testing.T) {
				t.Parallel()
				f := &fake{}
				if failing {
					f.set(refused, false)
				}
				// Three failures do not trip the default circuit (it
				// needs five), so every batch is a call; and on a loaded
				// machine, no healthy call may reach its deadline.
				b := newBreaker(t, f, append(patient, WithInstances(4))...)
				s := withMode(t, b, mode)
				ctx := context.Background()
				for i := range 3 {
					reqs := append(batch(fmt.Sprint("u", i), "tenant", core.PerMinute(40)),
						core.Request{Key: "all", Cost: 1, Terms: &core.Terms{Algorithm: globalRule, Limit: core.PerMinute(1000), Now: t0}})
					out := make([]core.Decision, len(reqs))
					st, counts, calls, batches := b.Stats(), b.Counts(), f.calls.Load(), f.batches.Load()
					if err := s.ApplyAll(ctx, reqs, out); err != nil {
						t.Fatalf("batch %d: ApplyAll: %v", i, err)
					}
					after, c := b.Stats(), b.Counts()
					if after.Calls != st.Calls+1 || f.calls.Load() != calls+1 || f.batches.Load() != batches+1 {
						t.Errorf("batch %d of %d requests: %d breaker calls, %d store calls, %d store batches; want 1 each",
							i, len(reqs), after.Calls-st.Calls, f.calls.Load()-calls, f.batches.Load()-batches)
					}
					wantFailures, wantSuccesses := counts.Failures, counts.Successes+1
					source := core.SourceStore
					if failing {
						wantFailures, wantSuccesses, source = counts.Failures+1, counts.Successes, modeSource[mode]
					}
					if c.Failures != wantFailures || c.Successes != wantSuccesses || after.Failures-st.Failures != uint64(wantFailures-counts.Failures) {
						t.Errorf("batch %d: the circuit counted %d failures and %d successes (stats %+v); want %d and %d",
							i, c.Failures-counts.Failures, c.Successes-counts.Successes, after, wantFailures-counts.Failures, wantSuccesses-counts.Successes)
					}
					for j, d := range out {
						if d.Source != source {
							t.Errorf("batch %d: request %d answered by %v, want %v", i, j, d.Source, source)
						}
					}
				}
			})
		}
	}
}

// TestBreakerBatchOpen checks that an open circuit answers whole batches
// by its mode, without a call: fail-open allows every request,
// fail-closed denies every one, degrade decides each under its share;
// a request under core.Inf is unlimited in every mode.
func TestBreakerBatchOpen(t *testing.T) {
	t.Parallel()
	f := &fake{}
	f.set(refused, false)
	b := settled(newBreaker(t, f, WithInstances(4), WithOpenTimeout(time.Hour)))
	ctx := context.Background()
	for range 10 {
		b.Apply(ctx, req("trip"))
	}
	if b.State() != Open {
		t.Fatalf("state %v, want open", b.State())
	}
	calls := f.calls.Load()
	for _, mode := range []Mode{FailOpen, FailClosed, Degrade} {
		s := withMode(t, b, mode)
		reqs := append(batch("u-"+mode.String(), "t-"+mode.String(), core.PerMinute(40)),
			core.Request{Key: "free", Cost: 1, Terms: &core.Terms{Algorithm: globalRule, Limit: core.Inf, Now: t0}})
		out := make([]core.Decision, len(reqs))
		rejected := b.Stats().Rejected
		if err := s.ApplyAll(ctx, reqs, out); err != nil {
			t.Fatalf("%v: ApplyAll: %v", mode, err)
		}
		if n := b.Stats().Rejected - rejected; n != 1 {
			t.Errorf("%v: Stats().Rejected rose by %d for one batch, want 1", mode, n)
		}
		if want := core.Unlimited(); out[2] != (core.Decision{Allowed: true, Limit: want.Limit, Remaining: want.Remaining, Level: want.Level, At: t0}) {
			t.Errorf("%v: the request under Inf = %+v, want core.Unlimited()", mode, out[2])
		}
		for i, d := range out[:2] {
			ok := d.Source == modeSource[mode]
			switch mode {
			case FailOpen:
				ok = ok && d == core.Decision{Allowed: true, At: t0, Source: core.SourceFailOpen}
			case FailClosed:
				ok = ok && !d.Allowed && d.RetryAfter > 59*time.Minute && d.Limit == 0 && d.At == t0
			case Degrade:
				// The shares of 100 and 40 a minute among 4 instances.
				ok = ok && d.Allowed && d.Limit == []int64{25, 10}[i] && d.Remaining == []int64{24, 9}[i]
			}
			if !ok {
				t.Errorf("%v: request %d = %+v; want the mode's answer", mode, i, d)
			}
		}
	}
	// A batch under Inf alone needs no answer of the mode.
	out := make([]core.Decision, 2)
	rejected := b.Stats().Rejected
	reqs := []core.Request{
		{Key: "a", Cost: 1, Terms: &core.Terms{Algorithm: userRule, Limit: core.Inf}},
		{Key: "b", Cost: 1, Terms: &core.Terms{Algorithm: tenantRule, Limit: core.Inf}},
	}
	if err := withMode(t, b, FailClosed).ApplyAll(ctx, reqs, out); err != nil || sansAt(out[0]) != core.Unlimited() || sansAt(out[1]) != core.Unlimited() || b.Stats().Rejected != rejected {
		t.Errorf("a batch under Inf = %+v, %v, %d rejected; want two unlimited decisions, none rejected", out, err, b.Stats().Rejected-rejected)
	}
	if n := f.calls.Load() - calls; n != 0 {
		t.Errorf("%d calls reached the store while the circuit was open, want 0", n)
	}
}

// TestDegradeBatchShares decides batches of two rules on the local store
// of an open circuit in degrade mode: each rule admits within its own
// share, and a batch one rule denies charges neither.
func TestDegradeBatchShares(t *testing.T) {
	t.Parallel()
	f := &fake{}
	f.set(refused, false)
	b := settled(newBreaker(t, f, WithMode(Degrade), WithInstances(4), WithOpenTimeout(time.Hour)))
	ctx := context.Background()
	for range 10 {
		b.Apply(ctx, req("trip"))
	}
	if b.State() != Open {
		t.Fatalf("state %v, want open", b.State())
	}
	run := func(reqs []core.Request) (admitted int) {
		t.Helper()
		for i := range 30 {
			out := make([]core.Decision, len(reqs))
			if err := b.ApplyAll(ctx, reqs, out); err != nil {
				t.Fatalf("batch %d: %v", i, err)
			}
			allowed := true
			for j, d := range out {
				if d.Source != core.SourceDegraded {
					t.Fatalf("batch %d: request %d = %+v, want a degraded decision", i, j, d)
				}
				allowed = allowed && d.Allowed
			}
			if allowed {
				admitted++
			}
		}
		return admitted
	}
	// left is what a rule has left: a peek at cost 1 reports what a
	// charge would leave.
	left := func(r core.Request) int64 {
		t.Helper()
		r.Op = core.OpPeek
		d, err := b.Apply(ctx, r)
		if err != nil || d.Source != core.SourceDegraded {
			t.Fatalf("peek at %s = %+v, %v", r.Key, d, err)
		}
		if !d.Allowed {
			return 0
		}
		return d.Remaining + 1
	}
	// The user rule's share is 25 (of 100 a minute), the tenant rule's 10
	// (of 40): the tenant binds, and the 20 batches it denied charged the
	// user rule nothing.
	first := batch("u", "t1", core.PerMinute(40))
	if n := run(first); n != 10 {
		t.Errorf("under shares of 25 and 10: %d of 30 batches admitted, want 10", n)
	}
	if n := left(first[0]); n != 15 {
		t.Errorf("the user rule has %d left after 10 admissions of 25, want 15: a denied batch charged it", n)
	}
	// Under a tenant share of 100 (of 400), the user rule binds: its
	// share, 25 in all, is spent.
	second := batch("u", "t2", core.PerMinute(400))
	if n := run(second); n != 15 {
		t.Errorf("the user rule's last 15 of its share: %d of 30 batches admitted", n)
	}
	if u, t2 := left(second[0]), left(second[1]); u != 0 || t2 != 85 {
		t.Errorf("left: user %d, tenant %d; want 0 and 85 (15 admitted of 100)", u, t2)
	}
}

// TestBreakerBatchInvalid checks that an invalid batch is an error that
// the store (or, while the circuit is open, the breaker) refuses before it
// acts, and that never counts as a failure, whatever the circuit's state.
func TestBreakerBatchInvalid(t *testing.T) {
	t.Parallel()
	ok := batch("u", "t", core.PerMinute(40))
	with := func(f func(r []core.Request)) []core.Request {
		r := batch("u", "t", core.PerMinute(40)) // terms of its own to change
		f(r)
		return r
	}
	tests := []struct {
		name string
		reqs []core.Request
		out  int
		want error
	}{
		{"empty", nil, 0, core.ErrInvalidRequest},
		{"short out", ok, 1, core.ErrInvalidRequest},
		{"long out", ok, 3, core.ErrInvalidRequest},
		{"same key and rule", with(func(r []core.Request) { r[1] = r[0] }), 2, core.ErrInvalidRequest},
		{"two operations", with(func(r []core.Request) { r[1].Op = core.OpPeek }), 2, core.ErrInvalidRequest},
		{"MaxWait on a charge", with(func(r []core.Request) { r[0].MaxWait = time.Second }), 2, core.ErrInvalidRequest},
		{"bad cost", with(func(r []core.Request) { r[1].Cost = -1 }), 2, core.ErrInvalidCost},
		{"bad key", with(func(r []core.Request) { r[0].Key = "" }), 2, core.ErrInvalidKey},
		{"no algorithm", with(func(r []core.Request) { r[1].Algorithm = nil }), 2, core.ErrNoAlgorithm},
		{"one bad request", with(func(r []core.Request) { r[0].Cost = -1 })[:1], 1, core.ErrInvalidCost},
	}
	for _, open := range []bool{false, true} {
		f := &fake{}
		b := settled(newBreaker(t, f, WithMode(Degrade), WithOpenTimeout(time.Hour)))
		if open {
			f.set(refused, false)
			for range 10 {
				b.Apply(context.Background(), req("trip"))
			}
			if b.State() != Open {
				t.Fatalf("state %v, want open", b.State())
			}
		}
		calls, st, counts := f.calls.Load(), b.Stats(), b.Counts()
		for _, mode := range []Mode{FailOpen, FailClosed, Degrade} {
			s := withMode(t, b, mode)
			for _, tt := range tests {
				out := make([]core.Decision, tt.out)
				err := s.ApplyAll(context.Background(), tt.reqs, out)
				if !errors.Is(err, tt.want) {
					t.Errorf("open %v, %v: %s: ApplyAll = %v, want an error wrapping %v", open, mode, tt.name, err, tt.want)
				}
				if slices.ContainsFunc(out, func(d core.Decision) bool { return d != core.Decision{} }) {
					t.Errorf("open %v, %v: %s: out was written: %+v", open, mode, tt.name, out)
				}
			}
		}
		if f.calls.Load() != calls || b.Stats().Failures != st.Failures || b.Stats().Changes != st.Changes || b.Counts().Failures != counts.Failures {
			t.Errorf("open %v: invalid batches made %d store calls; stats %+v → %+v, counts %+v → %+v; want no failure",
				open, f.calls.Load()-calls, st, b.Stats(), counts, b.Counts())
		}
		if open && (b.Stats() != st || b.Counts() != counts) {
			t.Errorf("open: the breaker's answers to invalid batches counted: stats %+v → %+v, counts %+v → %+v", st, b.Stats(), counts, b.Counts())
		}
	}
}

// TestBreakerBatchDeadline checks that a batch whose store does not
// answer returns at the per-call deadline with the mode's answer to every
// request, counts one failure, and has its call's context end with it:
// nothing of the call outlives ApplyAll.
func TestBreakerBatchDeadline(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fake{}
		f.set(nil, true)
		b := settled(newBreaker(t, f, WithMode(FailClosed), WithTimeout(5*time.Millisecond)))
		reqs := batch("u", "t", core.PerMinute(40))
		out := make([]core.Decision, len(reqs))
		start := time.Now()
		if err := b.ApplyAll(context.Background(), reqs, out); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took != 5*time.Millisecond {
			t.Errorf("ApplyAll took %v, want the deadline, 5ms", took)
		}
		for i, d := range out {
			if d.Source != core.SourceFailClosed {
				t.Errorf("request %d = %+v, want the mode's answer to a call past its deadline", i, d)
			}
		}
		if f.batches.Load() != 1 || f.ended.Load() != 1 {
			t.Errorf("%d batches, %d of them ended by their context; want 1 and 1", f.batches.Load(), f.ended.Load())
		}
		if c := b.Counts(); c.Failures != 1 {
			t.Errorf("Counts() = %+v, want 1 failure", c)
		}
	})
}

// seen is a store decorator recording the keys of each call it forwards,
// a batch as one entry.
type seen struct {
	core.Store
	mu    sync.Mutex
	calls [][]string
}

func (s *seen) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	s.record([]core.Request{req})
	return s.Store.Apply(ctx, req)
}

func (s *seen) ApplyAll(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	s.record(reqs)
	return s.Store.ApplyAll(ctx, reqs, out)
}

func (s *seen) record(reqs []core.Request) {
	var keys []string
	for _, r := range reqs {
		keys = append(keys, r.Key)
	}
	s.mu.Lock()
	s.calls = append(s.calls, keys)
	s.mu.Unlock()
}

// taken returns the calls recorded since the last taken.
func (s *seen) taken() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.calls
	s.calls = nil
	return c
}

// policyChain returns a memstore under a Counter under a seen.
func policyChain(t *testing.T) (*seen, *storetest.Counter) {
	t.Helper()
	mem, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	c := storetest.NewCounter(mem)
	return &seen{Store: c}, c
}

// TestPolicyBatch checks the policy per rule of a batch: each rule's
// override, a deny-listed key denying the whole batch without a store
// call, and allow-listed keys left out of the store's batch.
func TestPolicyBatch(t *testing.T) {
	t.Parallel()
	rec, counter := policyChain(t)
	p, err := New(rec,
		WithOverride(func(req core.Request) core.Limit {
			if strings.HasPrefix(req.Key, "pro:") {
				return core.PerSecond(100)
			}
			return req.Limit
		}),
		WithDenyList(func(key string) bool { return strings.HasPrefix(key, "bad:") }),
		WithAllowList(func(key string) bool { return strings.HasPrefix(key, "int:") }),
	)
	if err != nil {
		t.Fatal(err)
	}
	free := core.PerSecond(2)
	unknown := core.Decision{Allowed: true, Source: core.SourceDenyList} // a rule a deny-listed batch did not ask about
	allowListed := core.Unlimited()
	allowListed.Source = core.SourceAllowList
	tests := []struct {
		name  string
		keys  []string
		want  []core.Decision // by rule; Remaining and Limit are checked for the store's
		calls [][]string      // the store's calls
		apply int64           // the Counter's: Apply and ApplyAll calls
		all   int64
	}{
		{"override per rule", []string{"pro:1", "free:1"}, []core.Decision{
			{Allowed: true, Limit: 100, Remaining: 99}, {Allowed: true, Limit: 2, Remaining: 1},
		}, [][]string{{"pro:1", "free:1"}}, 0, 1},
		{"deny list", []string{"free:2", "bad:1", "pro:2"}, []core.Decision{
			unknown, {RetryAfter: core.RetryNever, Source: core.SourceDenyList}, unknown,
		}, nil, 0, 0},
		{"deny list before allow list", []string{"int:1", "bad:2"}, []core.Decision{
			allowListed, {RetryAfter: core.RetryNever, Source: core.SourceDenyList},
		}, nil, 0, 0},
		{"allow list", []string{"int:2", "free:3", "pro:3"}, []core.Decision{
			allowListed, {Allowed: true, Limit: 2, Remaining: 1}, {Allowed: true, Limit: 100, Remaining: 99},
		}, [][]string{{"free:3", "pro:3"}}, 0, 1},
		{"allow list leaves one", []string{"free:4", "int:3"}, []core.Decision{
			{Allowed: true, Limit: 2, Remaining: 1}, allowListed,
		}, [][]string{{"free:4"}}, 1, 0},
		{"all allow-listed", []string{"int:4", "int:5"}, []core.Decision{allowListed, allowListed}, nil, 0, 0},
	}
	algs := []core.Algorithm{userRule, tenantRule, globalRule}
	for _, tt := range tests {
		reqs := make([]core.Request, len(tt.keys))
		for i, k := range tt.keys {
			reqs[i] = core.Request{Key: k, Cost: 1, Terms: &core.Terms{Algorithm: algs[i], Limit: free, Now: t0}}
		}
		out := make([]core.Decision, len(reqs))
		apply, all, _ := counter.Counts()
		if err := p.ApplyAll(context.Background(), reqs, out); err != nil {
			t.Fatalf("%s: ApplyAll: %v", tt.name, err)
		}
		for i := range out {
			if tt.want[i].Source == core.SourceAllowList || tt.want[i].Source == core.SourceDenyList {
				want := tt.want[i]
				want.At = t0 // the request's instant
				if out[i] != want {
					t.Errorf("%s: rule %d (%s) = %+v, want %+v", tt.name, i, tt.keys[i], out[i], tt.want[i])
				}
				continue
			}
			if d := out[i]; d.Allowed != tt.want[i].Allowed || d.Limit != tt.want[i].Limit || d.Remaining != tt.want[i].Remaining || d.Source != core.SourceStore {
				t.Errorf("%s: rule %d (%s) = %+v, want %+v from the store", tt.name, i, tt.keys[i], d, tt.want[i])
			}
		}
		if got := rec.taken(); !slices.EqualFunc(got, tt.calls, slices.Equal) {
			t.Errorf("%s: the store was asked %q, want %q", tt.name, got, tt.calls)
		}
		a, b, _ := counter.Counts()
		if a-apply != tt.apply || b-all != tt.all {
			t.Errorf("%s: %d Apply and %d ApplyAll calls reached the store, want %d and %d", tt.name, a-apply, b-all, tt.apply, tt.all)
		}
	}
}

// TestPolicyBatchNearLimit checks that the near-limit signal is given per
// rule, and only for batches the store admitted.
func TestPolicyBatchNearLimit(t *testing.T) {
	t.Parallel()
	rec, _ := policyChain(t)
	var near []string
	p, err := New(rec, WithNearLimit(0.5, func(req core.Request, d core.Decision) {
		near = append(near, fmt.Sprintf("%s:%d", req.Key, d.Remaining))
	}))
	if err != nil {
		t.Fatal(err)
	}
	two, hundred, one := core.PerSecond(2), core.PerSecond(100), core.PerSecond(1)
	pair := func(ka string, la core.Limit, kb string, lb core.Limit) []core.Request {
		return []core.Request{
			{Key: ka, Cost: 1, Terms: &core.Terms{Algorithm: userRule, Limit: la, Now: t0}},
			{Key: kb, Cost: 1, Terms: &core.Terms{Algorithm: tenantRule, Limit: lb, Now: t0}},
		}
	}
	for i, st := range []struct {
		reqs    []core.Request
		allowed bool
		near    []string // the signals this batch gives
	}{
		{pair("a", two, "b", hundred), true, nil},             // a: 1 left of 2, not below half
		{pair("a", two, "b", hundred), true, []string{"a:0"}}, // a: 0 left
		// a denies; n, alone, would be left with 0 of 1, but nothing was
		// admitted, so nothing is signalled.
		{pair("a", two, "n", one), false, nil},
		// n was not charged: it admits now, and is signalled.
		{pair("a2", two, "n", one), true, []string{"n:0"}},
	} {
		near = nil
		out := make([]core.Decision, 2)
		if err := p.ApplyAll(context.Background(), st.reqs, out); err != nil {
			t.Fatal(err)
		}
		if allowed := out[0].Allowed && out[1].Allowed; allowed != st.allowed || !slices.Equal(near, st.near) {
			t.Errorf("step %d: allowed %v, signals %q; want %v, %q", i, allowed, near, st.allowed, st.near)
		}
	}
}

// TestPolicyBatchShadow checks shadow mode on a batch: a rule's denial is
// reported as allowed and recorded, the rules it did not deny are
// reported as the store answered, and nothing is charged.
func TestPolicyBatchShadow(t *testing.T) {
	t.Parallel()
	rec, _ := policyChain(t)
	var recorded []core.Decision
	p, err := New(rec, WithShadow(func(_ core.Request, d core.Decision) { recorded = append(recorded, d) }))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	reqs := []core.Request{
		{Key: "a", Cost: 1, Terms: &core.Terms{Algorithm: userRule, Limit: core.PerSecond(1), Now: t0}},
		{Key: "b", Cost: 1, Terms: &core.Terms{Algorithm: tenantRule, Limit: core.PerSecond(3), Now: t0}},
	}
	out := make([]core.Decision, 2)
	if err := p.ApplyAll(ctx, reqs, out); err != nil || !out[0].Allowed || !out[1].Allowed || out[0].Source != core.SourceStore {
		t.Fatalf("first batch = %+v, %v; want both admitted by the store", out, err)
	}
	if err := p.ApplyAll(ctx, reqs, out); err != nil {
		t.Fatal(err)
	}
	if d := out[0]; !d.Allowed || d.Source != core.SourceShadow || d.RetryAfter != 0 || d.Limit != 1 || d.Remaining != 0 {
		t.Errorf("the denying rule in shadow mode = %+v; want allowed, from shadow, with the denial's Limit and Remaining", d)
	}
	if d := out[1]; !d.Allowed || d.Source != core.SourceStore || d.Remaining != 1 {
		t.Errorf("the other rule = %+v; want the store's answer, 1 left", d)
	}
	if len(recorded) != 1 || recorded[0].Allowed || recorded[0].RetryAfter != time.Second {
		t.Errorf("recorded %+v, want the one denial, with a 1s wait", recorded)
	}
	// The denied batch charged nothing: b has 2 left, and a charge would
	// leave 1.
	peek := reqs[1]
	peek.Op = core.OpPeek
	if d, err := p.Apply(ctx, peek); err != nil || d.Remaining != 1 {
		t.Errorf("peek at b = %+v, %v; want 2 left: the shadowed batch charged it", d, err)
	}
}
