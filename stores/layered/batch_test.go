package layered_test

import (
	"context"
	"errors"
	"sync"
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
		user:   core.Request{Key: "alice", Cost: 1, Terms: &core.Terms{Algorithm: core.Named(algorithms.TokenBucket, "user"), Limit: core.PerMinute(2)}},
		shared: core.Request{Key: "all", Cost: 1, Terms: &core.Terms{Algorithm: core.Named(algorithms.FixedWindow, "shared"), Limit: core.PerMinute(100)}},
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
	user, shared := r.user.Clone(), r.shared.Clone()
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
	user, shared := r.user.Clone(), r.shared.Clone()
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
	user, other := r.user, r.user.Clone()
	other.Key, other.Algorithm = "acme", core.Named(algorithms.TokenBucket, "tenant")
	for range 2 {
		r.single("fill", user)
	}
	if d, _ := r.single("denied", user); d.Allowed || d.Source != core.SourceStore {
		t.Fatalf("third request = %s, want denied by the remote", describe(d))
	}
	reserve := func(q core.Request) core.Request {
		q = q.Clone()
		q.Op, q.MaxWait = core.OpReserve, time.Minute
		return q
	}
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
	user, shared := r.user.Clone(), r.shared.Clone()
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

// TestBatchAllotments checks that a batch whose every rule is allotted is
// answered from the allotments, with no remote call, all or nothing: a
// rule without an allotment takes one first (a call of its own, as a
// single request would), and a rule whose key waits for a whole allotment
// denies the batch here, spending nothing of the others' allotments.
func TestBatchAllotments(t *testing.T) {
	t.Parallel()
	r := newBatchRig(t, layered.Config{Allot: fixed(5)})
	user, shared := r.user.Clone(), r.shared.Clone()
	// The user's bucket holds 2, so its allotments are of 2: two
	// batches' worth, then none while its bucket refills.
	for i, want := range []struct {
		allowed     bool
		source      core.Source
		apply       int64 // takes
		userLeft    int64 // the user's Remaining: the remote's and the allotment's
		sharedSpent bool
	}{
		{true, core.SourceAllotment, 2, 1, true}, // both take an allotment, then spend it
		{true, core.SourceAllotment, 0, 0, true}, // from the allotments alone
		{false, core.SourceCache, 1, 0, false},   // the user's take is denied: the key waits
		{false, core.SourceCache, 0, 0, false},   // and waits, with no call
	} {
		out, apply, all := r.batch("batch", user, shared)
		if out[0].Allowed != want.allowed || out[0].Source != want.source || apply != want.apply || all != 0 || out[0].Remaining != want.userLeft {
			t.Errorf("batch %d = %s, %s after %d Apply and %d ApplyAll; want the user allowed %v from %v, %d left, after %d takes and no ApplyAll",
				i, describe(out[0]), describe(out[1]), apply, all, want.allowed, want.source, want.userLeft, want.apply)
		}
		if !out[1].Allowed || out[1].Source != core.SourceAllotment {
			t.Errorf("batch %d: the shared rule = %s, want allowed from its allotment", i, describe(out[1]))
		}
	}
	// The shared allotment of 5 was spent by the two admitted batches
	// only: 3 are left, which single requests spend with no call.
	for i := range 3 {
		if d, calls := r.single("spend", shared); d.Source != core.SourceAllotment || calls != 0 {
			t.Errorf("shared spend %d after the batches = %s after %d calls; want from the allotment, which holds %d", i, describe(d), calls, 3-i)
		}
	}
	// Nothing was admitted that the remote did not charge: the user's 2
	// and the shared rule's 5, taken.
	if u, s := r.remote(user), r.remote(shared); u.Remaining != 0 || s.Remaining != 95 {
		t.Errorf("the remote holds %d and %d, want 0 and 95", u.Remaining, s.Remaining)
	}
	// A batch with a rule that is not allotted goes to the remote whole,
	// and leaves the allotments as they were.
	other := r.shared.Clone()
	other.Key, other.Algorithm = "x", core.Named(algorithms.SlidingWindowLog, "log")
	user.Key, user.Limit = "bob", core.PerMinute(100)
	r.single("bob's take", user) // 5: 95 left at the remote, 4 in the allotment
	if out, apply, all := r.batch("mixed", user, other); !out[0].Allowed || out[0].Source != core.SourceStore || apply != 0 || all != 1 {
		t.Errorf("a batch with a rule that is not allotted = %s, %s after %d Apply and %d ApplyAll; want the remote's, in one ApplyAll", describe(out[0]), describe(out[1]), apply, all)
	}
	// The allotment still holds 4: this spend leaves 3, beside the 95 the
	// remote held after the take.
	if d, calls := r.single("bob's spend", user); d.Source != core.SourceAllotment || calls != 0 || d.Remaining != 95+3 {
		t.Errorf("bob after the mixed batch = %s after %d calls; want from his allotment, untouched by the batch, 98 remaining", describe(d), calls)
	}
}

// TestBatchAllotmentsConcurrentSafe hammers a two-rule batch whose rules
// are both allotted, and single requests of one of them, from 64
// goroutines: never more admitted than the tighter rule allows, and both
// keys charged at the remote for at least what was admitted.
func TestBatchAllotmentsConcurrentSafe(t *testing.T) {
	t.Parallel()
	r := newBatchRig(t, layered.Config{Allot: fixed(8)})
	user, shared := r.user.Clone(), r.shared.Clone()
	user.Limit, shared.Limit = core.PerHour(100), core.PerHour(1000)
	var admitted, singles atomic.Int64
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			out := make([]core.Decision, 2)
			for range 20 {
				if g%4 == 0 {
					d, err := r.s.Apply(context.Background(), shared)
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						singles.Add(1)
					}
					continue
				}
				if err := r.s.ApplyAll(context.Background(), []core.Request{user, shared}, out); err != nil {
					t.Error(err)
					return
				}
				// A denied batch says what each rule would have got.
				if out[0].Allowed && out[1].Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	got := admitted.Load()
	if got > 100 || got < 100-8 {
		t.Errorf("%d batches admitted, want at most 100 and at least 92 (an allotment's worth lapses)", got)
	}
	if u := r.remote(user); 100-u.Remaining < got {
		t.Errorf("the user's key was charged %d at the remote, fewer than the %d batches admitted", 100-u.Remaining, got)
	}
	if s := r.remote(shared); 1000-s.Remaining < got+singles.Load() {
		t.Errorf("the shared key was charged %d at the remote, fewer than the %d admitted", 1000-s.Remaining, got+singles.Load())
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
	a := core.Request{Key: "alice", Cost: 1, Terms: &core.Terms{Algorithm: core.Named(algorithms.TokenBucket, "user"), Limit: core.PerMinute(1)}}
	b := core.Request{Key: "all", Cost: 1, Terms: &core.Terms{Algorithm: core.Named(algorithms.GCRA, "shared"), Limit: core.PerMinute(100)}}
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
		{"an invalid request", []core.Request{a, {Key: "", Terms: &core.Terms{Algorithm: b.Algorithm, Limit: b.Limit}}}, 2},
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

// TestBatchStack checks a two-rule sluice.Stack over the layered store
// with allotments: each rule takes its allotment in a call of its own,
// then the stack is decided from the allotments with no call, and once
// the user's key waits for a whole allotment it is denied here, with
// nothing spent.
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
		allowed bool
		source  core.Source
		apply   int64
	}{
		{true, core.SourceAllotment, 2}, // the user's allotment of 3, the global one of 10
		{true, core.SourceAllotment, 0},
		{true, core.SourceAllotment, 0},
		{false, core.SourceCache, 1}, // the user's take is denied: its key waits
		{false, core.SourceCache, 0},
	} {
		before, beforeAll, _ := r.counter.Counts()
		v, err := stack.Allow(context.Background(), "alice", "everyone")
		if err != nil {
			t.Fatal(err)
		}
		apply, all, _ := r.counter.Counts()
		if v.Allowed != want.allowed || v.Rules()[0].Source != want.source || apply-before != want.apply || all != beforeAll || v.Rules()[1].Limit == 0 {
			t.Errorf("Allow %d = %+v after %d Apply and %d ApplyAll; want allowed %v, the user's decision from %v, %d Apply, no ApplyAll, the global limit known",
				i, v, apply-before, all-beforeAll, want.allowed, want.source, want.apply)
		}
	}
	// The global allotment paid for the three admissions only.
	global := core.Request{Key: "everyone", Cost: 1, Terms: &core.Terms{Algorithm: core.Named(algorithms.FixedWindow, "global"), Limit: core.PerMinute(1000)}}
	if d, calls := r.single("global alone", global); d.Source != core.SourceAllotment || calls != 0 || d.Remaining != 1000-10+6 {
		t.Errorf("the global rule alone = %s after %d calls; want from its allotment, %d remaining", describe(d), calls, 1000-10+6)
	}
}
