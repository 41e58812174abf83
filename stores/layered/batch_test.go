package layered_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores"
	"github.com/sluicehq/sluice/stores/layered"
	"github.com/sluicehq/sluice/stores/storetest"
)

// batchRig is a layered store over a storetest.Counter over a memstore,
// all on one virtual clock, and two rules to batch: a per-user token
// bucket and a shared fixed window, named as a sluice.Stack names them.
type batchRig struct {
	t       *testing.T
	c       *clock
	mem     core.Store
	counter *storetest.Counter
	s       *layered.Store
	user    core.Request
	shared  core.Request
}

func newBatchRig(t *testing.T, cfg layered.Config) *batchRig {
	t.Helper()
	c := newClock()
	mem := newMem(t, c)
	counter := storetest.NewCounter(mem)
	cfg.Now = c.Now
	return &batchRig{
		t: t, c: c, mem: mem, counter: counter,
		s:      newLayered(t, counter, cfg),
		user:   core.Request{Key: "alice", Algorithm: core.Named(algorithms.TokenBucket, "user"), Limit: core.PerMinute(2), Cost: 1},
		shared: core.Request{Key: "all", Algorithm: core.Named(algorithms.FixedWindow, "shared"), Limit: core.PerMinute(100), Cost: 1},
	}
}

// batch sends reqs to the layered store as one batch and returns the
// decisions and the remote Apply and ApplyAll calls it made.
func (r *batchRig) batch(what string, reqs ...core.Request) (out []core.Decision, apply, applyAll int64) {
	r.t.Helper()
	a0, b0, _ := r.counter.Counts()
	out = make([]core.Decision, len(reqs))
	if err := r.s.ApplyAll(context.Background(), reqs, out); err != nil {
		r.t.Fatalf("%s: ApplyAll: %v", what, err)
	}
	a1, b1, _ := r.counter.Counts()
	return out, a1 - a0, b1 - b0
}

// single sends req to the layered store alone and returns the decision
// and the remote calls (of either method) it made.
func (r *batchRig) single(what string, req core.Request) (core.Decision, int64) {
	r.t.Helper()
	a0, b0, _ := r.counter.Counts()
	d, err := r.s.Apply(context.Background(), req)
	if err != nil {
		r.t.Fatalf("%s: Apply: %v", what, err)
	}
	a1, b1, _ := r.counter.Counts()
	return d, a1 - a0 + b1 - b0
}

// remote asks the memstore behind the cache what req's key holds: a peek
// of cost 0, whose Remaining is what is left.
func (r *batchRig) remote(req core.Request) core.Decision {
	r.t.Helper()
	req.Op, req.Cost = core.OpPeek, 0
	d, err := r.mem.Apply(context.Background(), req)
	if err != nil {
		r.t.Fatal(err)
	}
	return d
}

// unknown is how a batch denied locally reports a rule it did not ask, at
// the instant of the batch's cached denial (see notAsked).
var unknown = core.Decision{Allowed: true, Source: core.SourceCache}

// notAsked reports whether d is how a batch denied locally at the instant
// of denial reports a rule it did not ask: unknown, at that instant.
func notAsked(d, denial core.Decision) bool {
	want := unknown
	want.At = denial.At
	return d == want
}

// TestBatchCachedDenial checks that a batch meeting a live cached denial
// for one of its rules is denied with no remote call: the denied rule
// carries its cached decision, the other is reported allowed with no
// Limit; neither is charged. Every other batch reaches the remote as
// exactly one ApplyAll and no Apply.
func TestBatchCachedDenial(t *testing.T) {
	t.Parallel()
	r := newBatchRig(t, layered.Config{})
	for i := range 2 {
		out, apply, all := r.batch("admitted batch", r.user, r.shared)
		if !out[0].Allowed || !out[1].Allowed || out[0].Source != core.SourceStore || apply != 0 || all != 1 {
			t.Fatalf("batch %d = %s, %s after %d Apply and %d ApplyAll; want both allowed by the remote in one ApplyAll",
				i, describe(out[0]), describe(out[1]), apply, all)
		}
	}
	// The user's bucket is empty: the remote denies it, a token every 30s.
	out, apply, all := r.batch("denied batch", r.user, r.shared)
	if out[0].Allowed || out[0].RetryAfter != 30*time.Second || out[0].Source != core.SourceStore || !out[1].Allowed || apply != 0 || all != 1 {
		t.Fatalf("third batch = %s, %s after %d Apply and %d ApplyAll; want the user denied for 30s by the remote in one ApplyAll",
			describe(out[0]), describe(out[1]), apply, all)
	}
	denial := out[0]

	r.c.Advance(10 * time.Second)
	peek := func(q core.Request) core.Request { q.Op = core.OpPeek; return q }
	for _, tc := range []struct {
		name string
		reqs []core.Request
		at   int // the rule denied
	}{
		{"charge", []core.Request{r.user, r.shared}, 0},
		{"charge, rules the other way round", []core.Request{r.shared, r.user}, 1},
	} {
		out, apply, all := r.batch(tc.name, tc.reqs...)
		want := denial
		want.Source, want.RetryAfter, want.ResetAfter = core.SourceCache, 20*time.Second, denial.ResetAfter-10*time.Second
		// 10s on, its level unknown (the key has refilled meanwhile).
		want.At, want.Level = denial.At.Add(10*time.Second), core.Level{}
		if apply != 0 || all != 0 {
			t.Errorf("%s batch with a cached denial made %d Apply and %d ApplyAll calls, want none", tc.name, apply, all)
		}
		if out[tc.at] != want {
			t.Errorf("%s batch: the denied rule = %+v, want its cached denial %+v", tc.name, out[tc.at], want)
		}
		if other := out[1-tc.at]; !notAsked(other, want) {
			t.Errorf("%s batch: the other rule = %+v, want allowed with Limit 0 from the cache, %+v", tc.name, other, unknown)
		}
	}
	// A batch of peeks asks the remote even so: it is how a stack is
	// inspected, and the cache knows nothing of the other rules.
	if out, apply, all := r.batch("peek", peek(r.user), peek(r.shared)); apply != 0 || all != 1 ||
		out[0].Allowed || out[0].Source != core.SourceStore || out[0].RetryAfter != 20*time.Second || !out[1].Allowed || out[1].Limit == 0 {
		t.Errorf("peek batch with a cached denial = %s, %s after %d Apply and %d ApplyAll; want both rules' real state from the remote in one ApplyAll",
			describe(out[0]), describe(out[1]), apply, all)
	}
	// The batch's denial answers the user's single requests too.
	if d, calls := r.single("user alone", r.user); d.Allowed || d.Source != core.SourceCache || calls != 0 {
		t.Errorf("the user alone = %s after %d remote calls; want the cached denial", describe(d), calls)
	}
	// Nothing denied was charged: the shared window holds 2 of 100.
	if d := r.remote(r.shared); d.Remaining != 98 {
		t.Errorf("the shared rule has %d left at the remote, want 98: a denied batch was charged", d.Remaining)
	}
	// Once the wait is over the batch goes to the remote again.
	r.c.Advance(20 * time.Second)
	if out, apply, all := r.batch("after the wait", r.user, r.shared); !out[0].Allowed || !out[1].Allowed || out[0].Source != core.SourceStore || apply != 0 || all != 1 {
		t.Errorf("after the wait = %s, %s after %d Apply and %d ApplyAll; want both allowed by the remote in one ApplyAll",
			describe(out[0]), describe(out[1]), apply, all)
	}
}

// TestBatchPerRuleDenial checks that each rule of a denied batch updates
// its own cached denial: the rule the remote denied is cached, for single
// requests and batches alike, and a rule admitted in the denied batch
// (charged nothing) keeps the denial it had for a larger cost.
func TestBatchPerRuleDenial(t *testing.T) {
	t.Parallel()
	r := newBatchRig(t, layered.Config{})
	user, shared := r.user, r.shared
	shared.Limit = core.PerMinute(3)
	// The shared rule: 2 of 3 charged, then a cost of 3 denied and cached.
	shared.Cost = 2
	r.single("shared 2", shared)
	shared.Cost = 3
	if d, _ := r.single("shared 3", shared); d.Allowed || d.Source != core.SourceStore {
		t.Fatalf("shared cost 3 = %s, want denied by the remote", describe(d))
	}
	// The user's bucket is emptied behind the cache's back, as by another
	// instance: the cache knows nothing of it.
	drain := user
	drain.Cost = 2
	if d, err := r.mem.Apply(context.Background(), drain); err != nil || !d.Allowed {
		t.Fatalf("draining the user at the remote = %s, %v", describe(d), err)
	}
	shared.Cost = 1
	out, apply, all := r.batch("user empty", user, shared)
	if out[0].Allowed || out[0].Source != core.SourceStore || !out[1].Allowed || apply != 0 || all != 1 {
		t.Fatalf("batch = %s, %s after %d Apply and %d ApplyAll; want the user denied, the shared rule admitted, by the remote in one ApplyAll",
			describe(out[0]), describe(out[1]), apply, all)
	}
	if d, calls := r.single("user alone", user); d.Allowed || d.Source != core.SourceCache || calls != 0 {
		t.Errorf("the user alone after the denied batch = %s after %d remote calls; want the batch's denial, cached", describe(d), calls)
	}
	if out, apply, all := r.batch("again", user, shared); out[0].Allowed || out[0].Source != core.SourceCache || !notAsked(out[1], out[0]) || apply+all != 0 {
		t.Errorf("the batch again = %s, %s after %d Apply and %d ApplyAll; want denied from the cache", describe(out[0]), describe(out[1]), apply, all)
	}
	shared.Cost = 3
	if d, calls := r.single("shared 3 again", shared); d.Allowed || d.Source != core.SourceCache || calls != 0 {
		t.Errorf("shared cost 3 after a denied batch admitted it at cost 1 = %s after %d remote calls; want its denial still cached", describe(d), calls)
	}
	shared.Cost = 1
	if d, calls := r.single("shared 1", shared); !d.Allowed || d.Source != core.SourceStore || calls != 1 {
		t.Errorf("shared cost 1 = %s after %d remote calls; want admitted by the remote: the denied batch charged nothing", describe(d), calls)
	}
}

// TestBatchRefund checks that a refund batch goes to the remote even
// when its rules have live cached denials, and that, admitted, it drops
// them: the next batch is decided by the remote and admitted.
func TestBatchRefund(t *testing.T) {
	t.Parallel()
	r := newBatchRig(t, layered.Config{})
	user, shared := r.user, r.shared
	shared.Limit = core.PerMinute(2)
	for range 2 {
		r.batch("fill", user, shared)
	}
	out, _, _ := r.batch("both empty", user, shared)
	if out[0].Allowed || out[1].Allowed {
		t.Fatalf("third batch = %s, %s; want both denied", describe(out[0]), describe(out[1]))
	}
	if out, apply, all := r.batch("cached", user, shared); out[0].Source != core.SourceCache || out[1].Source != core.SourceCache || apply+all != 0 {
		t.Fatalf("fourth batch = %s, %s after %d calls; want both cached denials", describe(out[0]), describe(out[1]), apply+all)
	}
	refund := func(q core.Request) core.Request { q.Op = core.OpRefund; return q }
	out, apply, all := r.batch("refund", refund(user), refund(shared))
	if !out[0].Allowed || !out[1].Allowed || out[0].Source != core.SourceStore || apply != 0 || all != 1 {
		t.Fatalf("refund batch = %s, %s after %d Apply and %d ApplyAll; want admitted by the remote in one ApplyAll", describe(out[0]), describe(out[1]), apply, all)
	}
	out, apply, all = r.batch("after the refund", user, shared)
	if !out[0].Allowed || !out[1].Allowed || out[0].Source != core.SourceStore || apply != 0 || all != 1 {
		t.Errorf("batch after the refund = %s, %s after %d Apply and %d ApplyAll; want admitted by the remote, no stale cached denial",
			describe(out[0]), describe(out[1]), apply, all)
	}
}

// TestBatchReserve checks that a reservation batch goes to the remote
// even when one of its rules has a live cached denial (a reservation may
// be admitted, with a delay, where a charge is denied), and that the
// admitted reservation drops the stale denial.
func TestBatchReserve(t *testing.T) {
	t.Parallel()
	r := newBatchRig(t, layered.Config{})
	user, other := r.user, r.user
	other.Key, other.Algorithm = "acme", core.Named(algorithms.TokenBucket, "tenant")
	for range 2 {
		r.single("fill", user)
	}
	if d, _ := r.single("denied", user); d.Allowed || d.Source != core.SourceStore {
		t.Fatalf("third request = %s, want denied by the remote", describe(d))
	}
	reserve := func(q core.Request) core.Request { q.Op, q.MaxWait = core.OpReserve, time.Minute; return q }
	out, apply, all := r.batch("reserve", reserve(user), reserve(other))
	if !out[0].Allowed || out[0].Delay != 30*time.Second || out[0].Source != core.SourceStore || !out[1].Allowed || apply != 0 || all != 1 {
		t.Fatalf("reservation batch = %+v, %+v after %d Apply and %d ApplyAll; want admitted by the remote with the user's 30s delay, in one ApplyAll",
			out[0], out[1], apply, all)
	}
	// The reservation changed the user's state: the cached denial, whose
	// numbers it made stale, is gone.
	if d, calls := r.single("user after", user); d.Allowed || d.Source != core.SourceStore || calls != 1 {
		t.Errorf("the user after the reservation = %s after %d calls; want the remote's denial", describe(d), calls)
	}
}

// TestBatchExplicitNow checks batches at explicit instants against a
// memstore without a cache: a denial cached at an instant denies the same
// batch at that instant locally, with the remote's own decision for the
// denied rule; the same batch at another instant, or with another cost,
// goes to the remote, and every decision the remote makes is the
// reference's.
func TestBatchExplicitNow(t *testing.T) {
	t.Parallel()
	r := newBatchRig(t, layered.Config{})
	ref := newMem(t, r.c)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	user, shared := r.user, r.shared
	user.Limit = core.PerMinute(2)
	for i, tc := range []struct {
		at     time.Duration
		cost   int64
		cached bool
	}{
		{0, 2, false},
		{0, 2, false}, // denied
		{0, 2, true},
		{0, 1, false}, // another cost; denied
		{0, 1, true},
		{time.Microsecond, 1, false}, // another instant
		{0, 2, false},                // the denial at cost 2 was replaced
	} {
		user.Now, user.Cost = t0.Add(tc.at), tc.cost
		shared.Now = user.Now
		want := make([]core.Decision, 2)
		out, apply, all := r.batch("explicit", user, shared)
		if err := ref.ApplyAll(context.Background(), []core.Request{user, shared}, want); err != nil {
			t.Fatal(err)
		}
		if calls := apply + all; tc.cached != (calls == 0) || all > 1 || apply > 0 {
			t.Errorf("batch %d (cost %d at t0+%v): %d Apply and %d ApplyAll; want cached %v, else one ApplyAll", i, tc.cost, tc.at, apply, all, tc.cached)
		}
		if tc.cached {
			want[0].Source, want[1] = core.SourceCache, unknown
			want[1].At = want[0].At
		}
		if out[0] != want[0] || out[1] != want[1] {
			t.Errorf("batch %d (cost %d at t0+%v) = %+v, %+v; want %+v, %+v", i, tc.cost, tc.at, out[0], out[1], want[0], want[1])
		}
	}
	// A batch on the local clock is not answered by a denial at an
	// explicit instant.
	user.Now, shared.Now, user.Cost = time.Time{}, time.Time{}, 1
	if out, apply, all := r.batch("local clock", user, shared); out[0].Source != core.SourceStore || apply != 0 || all != 1 {
		t.Errorf("a batch on the local clock = %s, %s after %d Apply and %d ApplyAll; want the remote's, in one ApplyAll", describe(out[0]), describe(out[1]), apply, all)
	}
}

// TestBatchNoAllotments checks that batches neither spend nor take allotments: a
// batch over a key holding an allotment goes to the remote with each rule's
// own cost, and the allotment is left as it was.
func TestBatchNoAllotments(t *testing.T) {
	t.Parallel()
	r := newBatchRig(t, layered.Config{Allot: fixed(5)})
	user, shared := r.user, r.shared
	user.Limit = core.PerMinute(100)
	if d, calls := r.single("take", user); d.Source != core.SourceAllotment || calls != 1 {
		t.Fatalf("the user alone = %s after %d calls; want an allotment taken in one call", describe(d), calls)
	}
	out, apply, all := r.batch("batch", user, shared)
	if !out[0].Allowed || !out[1].Allowed || out[0].Source != core.SourceStore || out[1].Source != core.SourceStore || apply != 0 || all != 1 {
		t.Fatalf("batch = %s, %s after %d Apply and %d ApplyAll; want both admitted by the remote in one ApplyAll", describe(out[0]), describe(out[1]), apply, all)
	}
	// The remote holds 100 less the allotment of 5 less the batch's 1; the
	// shared rule was charged 1, not a batch.
	if out[0].Remaining != 94 || out[1].Remaining != 99 {
		t.Errorf("the batch left %d and %d at the remote, want 94 and 99: it took or spent an allotment", out[0].Remaining, out[1].Remaining)
	}
	for i := range 4 {
		if d, calls := r.single("spend", user); d.Source != core.SourceAllotment || calls != 0 {
			t.Errorf("spend %d after the batch = %s after %d calls; want from the allotment, which holds 4", i, describe(d), calls)
		}
	}
}

// TestBatchErrors checks invalid batches, a closed store and a failing
// remote: invalid batches fail with the core sentinels and send nothing;
// a remote failure comes back wrapped, while batches that meet a cached
// denial are still denied locally.
func TestBatchErrors(t *testing.T) {
	t.Parallel()
	c := newClock()
	mem := newMem(t, c)
	var down atomic.Bool
	errDown := errors.New("remote down")
	counter := storetest.NewCounter(stores.Func(func(ctx context.Context, req core.Request) (core.Decision, error) {
		if down.Load() {
			return core.Decision{}, errDown
		}
		return mem.Apply(ctx, req)
	}))
	s := newLayered(t, counter, layered.Config{Now: c.Now})
	ctx := context.Background()
	a := core.Request{Key: "alice", Algorithm: core.Named(algorithms.TokenBucket, "user"), Limit: core.PerMinute(1), Cost: 1}
	b := core.Request{Key: "all", Algorithm: core.Named(algorithms.GCRA, "shared"), Limit: core.PerMinute(100), Cost: 1}
	peekB := b
	peekB.Op = core.OpPeek
	for _, tc := range []struct {
		name string
		reqs []core.Request
		out  int
	}{
		{"no requests", nil, 0},
		{"short out", []core.Request{a, b}, 1},
		{"two operations", []core.Request{a, peekB}, 2},
		{"the same rule twice", []core.Request{a, a}, 2},
		{"an invalid request", []core.Request{a, {Key: "", Algorithm: b.Algorithm, Limit: b.Limit}}, 2},
	} {
		if err := s.ApplyAll(ctx, tc.reqs, make([]core.Decision, tc.out)); err == nil {
			t.Errorf("%s: ApplyAll succeeded, want an error", tc.name)
		} else if !errors.Is(err, core.ErrInvalidRequest) && !errors.Is(err, core.ErrInvalidKey) {
			t.Errorf("%s: %v, want a core sentinel", tc.name, err)
		}
	}
	if apply, all, _ := counter.Counts(); apply+all != 0 {
		t.Errorf("invalid batches made %d Apply and %d ApplyAll calls at the remote, want none", apply, all)
	}

	out := make([]core.Decision, 2)
	for range 2 {
		if err := s.ApplyAll(ctx, []core.Request{a, b}, out); err != nil {
			t.Fatal(err)
		}
	}
	if out[0].Allowed {
		t.Fatalf("second batch: the user = %s, want denied", describe(out[0]))
	}
	down.Store(true)
	if err := s.ApplyAll(ctx, []core.Request{a, b}, out); err != nil || out[0].Source != core.SourceCache || !notAsked(out[1], out[0]) {
		t.Errorf("a batch with a cached denial, remote down = %s, %s, %v; want denied from the cache", describe(out[0]), describe(out[1]), err)
	}
	other := a
	other.Key = "bob"
	if err := s.ApplyAll(ctx, []core.Request{other, b}, out); !errors.Is(err, errDown) {
		t.Errorf("another batch with the remote down: %v, want the remote's error, wrapped", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.ApplyAll(ctx, []core.Request{a, b}, out); !errors.Is(err, core.ErrClosed) {
		t.Errorf("ApplyAll after Close: %v, want ErrClosed", err)
	}
}

// TestBatchStack checks a two-rule sluice.Stack over the layered store: a
// decision is one remote ApplyAll while the rules admit, and none once a
// rule's denial is cached.
func TestBatchStack(t *testing.T) {
	t.Parallel()
	r := newBatchRig(t, layered.Config{Allot: fixed(10)})
	stack, err := sluice.NewStack(r.s,
		sluice.Rule{Name: "user", Algorithm: algorithms.TokenBucket, Limit: core.PerMinute(3)},
		sluice.Rule{Name: "global", Algorithm: algorithms.FixedWindow, Limit: core.PerMinute(1000)},
	)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		allowed     bool
		source      core.Source
		applyAll    int64
		sharedKnown bool
	}{
		{true, core.SourceStore, 1, true},
		{true, core.SourceStore, 1, true},
		{true, core.SourceStore, 1, true},
		{false, core.SourceStore, 1, true},
		{false, core.SourceCache, 0, false},
		{false, core.SourceCache, 0, false},
	} {
		_, before, _ := r.counter.Counts()
		v, err := stack.Allow(context.Background(), "alice", "everyone")
		if err != nil {
			t.Fatal(err)
		}
		apply, after, _ := r.counter.Counts()
		if v.Allowed != want.allowed || v.Rules[0].Source != want.source || after-before != want.applyAll || apply != 0 || (v.Rules[1].Limit != 0) != want.sharedKnown {
			t.Errorf("Allow %d = %+v after %d ApplyAll (%d Apply in all); want allowed %v, the user's decision from %v, %d ApplyAll, no Apply, the global limit known %v",
				i, v, after-before, apply, want.allowed, want.source, want.applyAll, want.sharedKnown)
		}
	}
}
