package sluice_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores"
	"github.com/sluicehq/sluice/stores/memstore"
)

// inTurn is a store that decides batches in turn, as a store that cannot
// batch atomically does.
type inTurn struct{ core.Store }

func (s inTurn) ApplyAll(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	if err := stores.ValidateAll(reqs, out); err != nil {
		return err
	}
	return stores.ApplyInTurn(ctx, s.Store, reqs, out)
}

// TestStackSteps runs a burst limit and a daily quota on one user, under
// a tenant-wide limit, on the memory store (atomic) and on a store that
// charges in turn and refunds.
func TestStackSteps(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, atomic := range []bool{true, false} {
		clock := t0
		_, c := newLimiter(t, func() time.Time { return clock }, algorithms.TokenBucket, core.PerSecond(1))
		var store core.Store = c
		if !atomic {
			store = inTurn{c}
		}
		stack, err := sluice.NewStack(store,
			sluice.Rule{Name: "burst", Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(2).WithBurst(3)},
			sluice.Rule{Name: "daily", Algorithm: algorithms.TokenBucket, Limit: core.PerDay(5)},
			sluice.Rule{Name: "tenant", Algorithm: algorithms.FixedWindow, Limit: core.PerSecond(4)},
		)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		for i, st := range []struct {
			at      time.Duration
			user    string
			n       int64
			allowed bool
			binding string
			retry   time.Duration
		}{
			{0, "u1", 3, true, "burst", 0},                       // burst and tenant both empty: burst comes first
			{0, "u1", 1, false, "burst", 500 * time.Millisecond}, // burst denies: daily and tenant keep their units
			{0, "u2", 1, true, "tenant", 0},                      // the tenant's last unit this second
			{0, "u2", 1, false, "tenant", time.Second},
			{time.Second, "u1", 2, true, "burst", 0}, // burst and daily both at 0 left: the first binds
			{2 * time.Second, "u1", 1, false, "daily", 24*time.Hour/5 - 2*time.Second},
			{2 * time.Second, "u2", 3, true, "burst", 0},
		} {
			clock = t0.Add(st.at)
			v, err := stack.AllowN(ctx, []string{st.user, st.user, "tenant"}, st.n)
			if err != nil {
				t.Fatalf("atomic %v, step %d: %v", atomic, i, err)
			}
			got := stack.Rules()[v.Binding].Name
			if v.Allowed != st.allowed || got != st.binding || v.RetryAfter != st.retry {
				t.Errorf("atomic %v, step %d: AllowN(T0+%v, %s, %d) = allowed %v, binding %s, retry %v; want %v, %s, %v\n%+v",
					atomic, i, st.at, st.user, st.n, v.Allowed, got, v.RetryAfter, st.allowed, st.binding, st.retry, v.Rules())
			}
		}
		if atomic && c.batches.Load() != c.calls.Load() {
			t.Errorf("an atomic store got %d calls for %d batches: a stack decision must be one ApplyAll", c.calls.Load(), c.batches.Load())
		}
	}
}

func TestNewStack(t *testing.T) {
	s, _ := newLimiter(t, nil, algorithms.TokenBucket, core.PerSecond(1))
	store := s.Store()
	tb := algorithms.TokenBucket
	for _, tc := range []struct {
		rules []sluice.Rule
		want  error
	}{
		{nil, core.ErrInvalidRequest},
		{[]sluice.Rule{{Name: "", Algorithm: tb, Limit: core.PerSecond(1)}}, core.ErrInvalidRequest},
		{[]sluice.Rule{{Name: "a:b", Algorithm: tb, Limit: core.PerSecond(1)}}, core.ErrInvalidRequest},
		{[]sluice.Rule{{Name: "a", Algorithm: tb, Limit: core.PerSecond(1)}, {Name: "a", Algorithm: tb, Limit: core.PerDay(1)}}, core.ErrInvalidRequest},
		{[]sluice.Rule{{Name: "a", Limit: core.PerSecond(1)}}, core.ErrNoAlgorithm},
		{[]sluice.Rule{{Name: "a", Algorithm: tb}}, core.ErrInvalidLimit},
	} {
		if _, err := sluice.NewStack(store, tc.rules...); !errors.Is(err, tc.want) {
			t.Errorf("NewStack(%+v) = %v, want %v", tc.rules, err, tc.want)
		}
	}
	if _, err := sluice.NewStack(nil, sluice.Rule{Name: "a", Algorithm: tb, Limit: core.PerSecond(1)}); !errors.Is(err, core.ErrNoStore) {
		t.Errorf("NewStack(nil store) = %v, want ErrNoStore", err)
	}
}

// TestStackBadInput checks that what a stack cannot do is refused with
// nothing charged, naming the rule at fault.
func TestStackBadInput(t *testing.T) {
	_, c := newLimiter(t, nil, algorithms.TokenBucket, core.PerSecond(1))
	stack, err := sluice.NewStack(c,
		sluice.Rule{Name: "user", Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(10)},
		sluice.Rule{Name: "tenant", Algorithm: algorithms.FixedWindow, Limit: core.PerSecond(5)},
	)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		call func() error
		want error
		rule string // the rule the error must name, if any
	}{
		{"too many keys", func() error { _, err := stack.Allow(ctx, "u", "t", "x"); return err }, core.ErrInvalidRequest, ""},
		{"too few keys", func() error { _, err := stack.Allow(ctx, "u"); return err }, core.ErrInvalidRequest, ""},
		{"empty key", func() error { _, err := stack.Allow(ctx, "u", ""); return err }, core.ErrInvalidKey, `"tenant"`},
		{"negative cost", func() error { _, err := stack.AllowN(ctx, []string{"u", "t"}, -1); return err }, core.ErrInvalidCost, ""},
		{"reserve under a fixed window", func() error {
			_, err := stack.ReserveN(ctx, []string{"u", "t"}, 1, time.Second)
			return err
		}, core.ErrUnsupported, `"tenant"`},
		{"wait under a fixed window", func() error { _, err := stack.Wait(ctx, "u", "t"); return err }, core.ErrUnsupported, `"tenant"`},
		{"reserve without a wait", func() error {
			_, err := stack.ReserveN(ctx, []string{"u", "t"}, 1, 0)
			return err
		}, core.ErrInvalidRequest, ""},
		{"reset of an empty key", func() error { return stack.Reset(ctx, "", "t") }, core.ErrInvalidKey, `"user"`},
	} {
		err := tc.call()
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		} else if !strings.Contains(err.Error(), tc.rule) {
			t.Errorf("%s: err = %v, want it to name rule %s", tc.name, err, tc.rule)
		}
	}
	// The store refused each request (a request is validated once, where
	// it is decided), so nothing was charged: the peek below sees every
	// rule full.

	// A cost above one rule's capacity: unsatisfiable, nothing charged.
	v, err := stack.AllowN(ctx, []string{"u", "t"}, 6)
	if err != nil {
		t.Fatal(err)
	}
	if v.Allowed || !v.Unsatisfiable() || stack.Rules()[v.Binding].Name != "tenant" {
		t.Errorf("cost 6 over a tenant capacity of 5 = %+v, want unsatisfiable, bound by tenant", v)
	}
	p, err := stack.Peek(ctx, "u", "t")
	if err != nil {
		t.Fatal(err)
	}
	if p.Rules()[0].Remaining != 9 || p.Rules()[1].Remaining != 4 {
		t.Errorf("after an unsatisfiable request the rules peek %d and %d left, want 9 and 4 (untouched)", p.Rules()[0].Remaining, p.Rules()[1].Remaining)
	}
}

// TestStackPeekReset checks that Peek changes nothing and says what Allow
// will, and that Reset forgets every rule.
func TestStackPeekReset(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	_, c := newLimiter(t, func() time.Time { return t0 }, algorithms.TokenBucket, core.PerSecond(1))
	stack, err := sluice.NewStack(c,
		sluice.Rule{Name: "minute", Algorithm: algorithms.GCRA, Limit: core.PerMinute(3)},
		sluice.Rule{Name: "day", Algorithm: algorithms.SlidingWindowCounter, Limit: core.PerDay(2)},
	)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	keys := []string{"u", "u"}
	for i := range 3 {
		p1, err := stack.Peek(ctx, keys...)
		if err != nil {
			t.Fatal(err)
		}
		p2, _ := stack.Peek(ctx, keys...)
		a, err := stack.Allow(ctx, keys...)
		if err != nil {
			t.Fatal(err)
		}
		if p1.Allowed != a.Allowed || p1.Binding != a.Binding || p2.Rules()[1].Remaining != p1.Rules()[1].Remaining {
			t.Errorf("request %d: peeks %+v and %+v, then Allow %+v: a peek must say what Allow does and change nothing", i, p1, p2, a)
		}
		if want := i < 2; a.Allowed != want {
			t.Errorf("request %d: allowed %v, want %v (the daily rule admits 2)", i, a.Allowed, want)
		}
	}
	if err := stack.Reset(ctx, keys...); err != nil {
		t.Fatal(err)
	}
	v, err := stack.Peek(ctx, keys...)
	if err != nil {
		t.Fatal(err)
	}
	if !v.Allowed || v.Rules()[0].Remaining != 2 || v.Rules()[1].Remaining != 1 {
		t.Errorf("after Reset: %+v, want both rules fresh (2 and 1 left after a peek of 1)", v.Rules())
	}
}

// TestStackReserve reserves under two bucket rules: all or none, the
// longest delay, and Cancel refunding every rule in one store call.
func TestStackReserve(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := t0
	_, c := newLimiter(t, func() time.Time { return clock }, algorithms.TokenBucket, core.PerSecond(1))
	stack, err := sluice.NewStack(c,
		sluice.Rule{Name: "fast", Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(10).WithBurst(1)},
		sluice.Rule{Name: "slow", Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(1).WithBurst(1)},
	)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	keys := []string{"u", "u"}
	sec := time.Second
	first, err := stack.ReserveN(ctx, keys, 1, sec)
	if err != nil {
		t.Fatal(err)
	}
	if !first.OK() || first.Delay != 0 {
		t.Fatalf("first reservation = %+v, want OK at once", first.Verdict)
	}
	second, err := stack.ReserveN(ctx, keys, 1, sec)
	if err != nil {
		t.Fatal(err)
	}
	if !second.OK() || second.Delay != sec || second.Rules()[0].Delay != 100*time.Millisecond || stack.Rules()[second.Binding].Name != "slow" {
		t.Fatalf("second reservation = %+v, want OK after 1s, the slow rule's delay (fast: 100ms)", second.Verdict)
	}
	third, err := stack.ReserveN(ctx, keys, 1, 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if third.OK() {
		t.Fatalf("third reservation within 1.5s = %+v, want refused: the slow rule needs 2s", third.Verdict)
	}
	// Refused: the fast rule, which could have reserved, was not charged.
	p, _ := stack.Peek(ctx, keys...)
	if p.Rules()[0].RetryAfter != 200*time.Millisecond {
		t.Errorf("the fast rule after a refused stack reservation waits %v, want 200ms (two reservations, not three)", p.Rules()[0].RetryAfter)
	}
	before := c.calls.Load()
	if err := second.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	if err := second.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	if n := c.calls.Load() - before; n != 1 {
		t.Errorf("two Cancels made %d store calls, want 1", n)
	}
	p, _ = stack.Peek(ctx, keys...)
	if p.Rules()[0].RetryAfter != 100*time.Millisecond || p.Rules()[1].RetryAfter != sec {
		t.Errorf("after Cancel the rules wait %v and %v, want 100ms and 1s: every rule refunded", p.Rules()[0].RetryAfter, p.Rules()[1].RetryAfter)
	}
}

// TestStackWait waits under two rules: the tighter one sets the pace, and
// a cancelled wait refunds both.
func TestStackWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, c := newLimiter(t, nil, algorithms.TokenBucket, core.PerSecond(1))
		stack, err := sluice.NewStack(c,
			sluice.Rule{Name: "user", Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(20).WithBurst(1)},
			sluice.Rule{Name: "all", Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(10).WithBurst(1)},
		)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 1950*time.Millisecond)
		defer cancel()
		start := time.Now()
		n := 0
		for {
			if _, err := stack.Wait(ctx, "u", "all"); err != nil {
				if !errors.Is(err, sluice.ErrWaitTooLong) {
					t.Fatalf("Wait: %v, want ErrWaitTooLong at the deadline", err)
				}
				break
			}
			if want := time.Duration(n) * 100 * time.Millisecond; time.Since(start) != want {
				t.Fatalf("admission %d at %v, want %v", n, time.Since(start), want)
			}
			n++
		}
		if n != 20 {
			t.Errorf("%d admissions in 1.95s at the tighter 10/s, want 20", n)
		}
		if b, calls := c.batches.Load(), c.calls.Load(); b != calls || calls != int64(n)+1 {
			t.Errorf("%d store calls (%d batches) for %d admissions and one refusal, want one batch each", calls, b, n)
		}

		// A wait cancelled while it sleeps gives both rules their token back.
		cctx, stop := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, stop)
		if _, err := stack.Wait(cctx, "v", "all2"); err != nil {
			t.Fatal(err) // at once: fresh keys
		}
		if _, err := stack.Wait(cctx, "v", "all2"); !errors.Is(err, context.Canceled) {
			t.Fatalf("a wait cancelled while sleeping = %v, want context.Canceled", err)
		}
		v, err := stack.Peek(context.Background(), "v", "all2")
		if err != nil {
			t.Fatal(err)
		}
		if v.Rules()[0].RetryAfter != 0 || v.Rules()[1].RetryAfter != 50*time.Millisecond {
			t.Errorf("after a cancelled wait the rules wait %v and %v, want 0 and 50ms: both refunded", v.Rules()[0].RetryAfter, v.Rules()[1].RetryAfter)
		}
	})
}

// TestStackAcquire runs a concurrency rule beside a rate rule: Allow is
// refused, Acquire takes both or neither, Release frees the slot only.
func TestStackAcquire(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	_, c := newLimiter(t, func() time.Time { return t0 }, algorithms.TokenBucket, core.PerSecond(1))
	stack, err := sluice.NewStack(c,
		sluice.Rule{Name: "inflight", Algorithm: algorithms.Concurrency, Limit: core.Per(1, time.Minute)},
		sluice.Rule{Name: "rate", Algorithm: algorithms.TokenBucket, Limit: core.PerMinute(3)},
	)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := stack.Allow(ctx, "u", "u"); !errors.Is(err, core.ErrUnsupported) {
		t.Errorf("Allow on a stack with a concurrency rule = %v, want ErrUnsupported", err)
	}
	a, err := stack.Acquire(ctx, "u", "u")
	if err != nil {
		t.Fatal(err)
	}
	if !a.OK() || a.ID() == 0 {
		t.Fatalf("first Acquire = %+v, id %d; want acquired", a.Verdict, a.ID())
	}
	b, err := stack.Acquire(ctx, "u", "u")
	if err != nil {
		t.Fatal(err)
	}
	if b.OK() || stack.Rules()[b.Binding].Name != "inflight" {
		t.Fatalf("second Acquire while the first holds the slot = %+v, want denied by inflight", b.Verdict)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err) // not acquired: nothing to do
	}
	before := c.calls.Load()
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := c.calls.Load() - before; n != 1 {
		t.Errorf("Release made %d store calls, want 1", n)
	}
	if _, err := a.Renew(ctx); !errors.Is(err, core.ErrInvalidRequest) {
		t.Errorf("Renew after Release = %v, want ErrInvalidRequest", err)
	}
	v, err := stack.Peek(ctx, "u", "u")
	if err != nil {
		t.Fatal(err)
	}
	// The denied second Acquire charged nothing; the first's rate charge
	// stays after its release.
	if v.Rules()[0].Remaining != 0 || v.Rules()[1].Remaining != 1 {
		t.Errorf("after a release: inflight %d, rate %d left (after a peek of 1), want 0 and 1", v.Rules()[0].Remaining, v.Rules()[1].Remaining)
	}
}

func TestApplyAllInvalid(t *testing.T) {
	_, c := newLimiter(t, nil, algorithms.TokenBucket, core.PerSecond(1))
	tb := core.Request{Key: "k", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(1)}}
	peek, other, twice, bad, waits := tb, tb, tb, tb, tb
	peek.Op = core.OpPeek
	other.Key = "other"
	bad.Cost = -1
	waits.Terms = &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(1), MaxWait: time.Second}
	for _, store := range []core.Store{c, stores.Func(c.Apply), inTurn{c}} {
		for _, tc := range []struct {
			reqs []core.Request
			out  int
			want error
		}{
			{nil, 0, core.ErrInvalidRequest},
			{[]core.Request{tb}, 2, core.ErrInvalidRequest},
			{[]core.Request{other, peek}, 2, core.ErrInvalidRequest},
			{[]core.Request{tb, twice}, 2, core.ErrInvalidRequest},
			{[]core.Request{other, bad}, 2, core.ErrInvalidCost},
			{[]core.Request{other, waits}, 2, core.ErrInvalidRequest},
		} {
			if err := store.ApplyAll(context.Background(), tc.reqs, make([]core.Decision, tc.out)); !errors.Is(err, tc.want) {
				t.Errorf("%T.ApplyAll(%+v) = %v, want %v", store, tc.reqs, err, tc.want)
			}
		}
	}
	if n := c.calls.Load() - c.batches.Load(); n != 0 {
		t.Errorf("invalid requests reached the store's Apply %d times", n)
	}
}

// TestAllowAllocatesNothing checks the hot path: Limiter.Allow on the
// memory store allocates nothing, for a plain limiter, one at an instant
// and one following a source whose limit holds (its terms are built
// when the limit changes, and only then).
func TestAllowAllocatesNothing(t *testing.T) {
	lim, _ := newLimiter(t, nil, algorithms.TokenBucket, core.PerSecond(1000))
	src := &source{}
	src.set(core.PerSecond(500))
	following, err := lim.Following(src)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for name, l := range map[string]*sluice.Limiter{
		"plain":     lim,
		"At":        lim.At(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)),
		"Following": following,
	} {
		if n := testing.AllocsPerRun(1000, func() { l.Allow(ctx, "hot") }); n != 0 {
			t.Errorf("%s Limiter.Allow on memstore: %v allocations, want 0", name, n)
		}
	}
	limits := [2]core.Limit{core.PerSecond(600), core.PerSecond(700)}
	turn := 0
	changing := func() {
		turn ^= 1
		src.l.Store(&limits[turn])
		following.Allow(ctx, "hot")
	}
	if n := testing.AllocsPerRun(1000, changing); n != 1 {
		t.Errorf("Allow after each change of the source's limit: %v allocations, want 1 (its terms)", n)
	}
}

// TestStackAllowAllocates checks what a stack's decision on the memory
// store allocates: nothing for one rule, whose verdict is its decision,
// and for several rules only the Verdict's Rules, which the caller keeps
// (the requests are the stack's to reuse).
func TestStackAllowAllocates(t *testing.T) {
	s, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	user := sluice.Rule{Name: "user", Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(1000)}
	one, err := sluice.NewStack(s, user)
	if err != nil {
		t.Fatal(err)
	}
	three, err := sluice.NewStack(s, user,
		sluice.Rule{Name: "tenant", Algorithm: algorithms.GCRA, Limit: core.PerSecond(10_000)},
		sluice.Rule{Name: "global", Algorithm: algorithms.FixedWindow, Limit: core.PerSecond(100_000)},
	)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var left int64
	if n := testing.AllocsPerRun(1000, func() {
		v, _ := one.Allow(ctx, "alice")
		left += v.Rules()[0].Remaining
	}); n != 0 {
		t.Errorf("Stack.Allow of 1 rule on memstore, reading its Rules: %v allocations, want 0", n)
	}
	keys := []string{"alice", "acme", "all"}
	if n := testing.AllocsPerRun(1000, func() { three.Allow(ctx, keys...) }); n != 1 {
		t.Errorf("Stack.Allow of 3 rules on memstore: %v allocations, want 1 (the Verdict's Rules)", n)
	}
}

// TestVerdictRules checks that a verdict's Rules hold each rule's
// decision: for one rule the verdict's own decision, in a copy of the
// verdict too; for a zero Verdict, none.
func TestVerdictRules(t *testing.T) {
	if rules := new(sluice.Verdict).Rules(); rules != nil {
		t.Errorf("a zero Verdict's Rules: %+v, want none", rules)
	}
	s, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	stack, err := sluice.NewStack(s, sluice.Rule{Name: "user", Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(3)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	first, err := stack.Allow(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	second, err := stack.Allow(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	kept := first
	for _, c := range []struct {
		name string
		v    *sluice.Verdict
		left int64
	}{{"first", &first, 2}, {"second", &second, 1}, {"a copy of the first", &kept, 2}} {
		rules := c.v.Rules()
		if len(rules) != 1 || rules[0] != c.v.Decision || rules[0].Remaining != c.left {
			t.Errorf("%s: Rules %+v, want the verdict's decision, %d left", c.name, rules, c.left)
		}
	}
}
