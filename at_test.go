package sluice_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores"
)

// TestLimiterAt runs a token bucket of 10 a second in bursts of 4
// through a limiter fixed at instants of the caller's, far from the
// store's clock (which reads 1999): every verb decides at its instant,
// every decision reports it, and the limiter At came from still decides
// on the store's clock.
func TestLimiterAt(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := time.Date(1999, 12, 31, 23, 59, 59, 0, time.UTC)
	lim, c := newLimiter(t, func() time.Time { return clock }, algorithms.TokenBucket, core.PerSecond(10).WithBurst(4))
	ctx := context.Background()
	ms := time.Millisecond
	for i, st := range []struct {
		at   time.Duration
		verb string // allow, at-most, level, peek, reserve (within 1s)
		n    int64

		allowed   bool
		admitted  int64
		remaining int64
		level     float64
		retry     time.Duration
		delay     time.Duration
		decided   time.Duration // the decision's instant, from t0
	}{
		{0, "level", 0, true, 0, 4, 4, 0, 0, 0},
		{0, "allow", 3, true, 0, 1, 1, 0, 0, 0},
		{0, "at-most", 5, true, 1, 0, 0, 0, 0, 0},
		{0, "at-most", 5, false, 0, 0, 0, 100 * ms, 0, 0},
		{30 * ms, "level", 0, true, 0, 0, 0.3, 0, 0, 30 * ms},
		{250 * ms, "peek", 0, true, 0, 1, 1.5, 0, 0, 250 * ms},
		{250 * ms, "at-most", 3, true, 2, 0, 0.5, 0, 0, 250 * ms},
		// Behind the last charge: decided at the last charge.
		{100 * ms, "level", 0, true, 0, 0, 0.5, 0, 0, 250 * ms},
		{250 * ms, "reserve", 2, true, 0, 0, -1.5, 0, 150 * ms, 250 * ms},
		{300 * ms, "level", 0, true, 0, 0, -1, 0, 0, 300 * ms},
		{300 * ms, "at-most", 1, false, 0, 0, -1, 200 * ms, 0, 300 * ms},
		// A microsecond and a half after 300ms is decided at the whole
		// microsecond.
		{300*ms + 1500*time.Nanosecond, "level", 0, true, 0, 0, -0.99999, 0, 0, 300*ms + time.Microsecond},
	} {
		at := lim.At(t0.Add(st.at))
		var d core.Decision
		var err error
		switch st.verb {
		case "allow":
			d, err = at.AllowN(ctx, "k", st.n)
		case "at-most":
			d, err = at.AllowAtMost(ctx, "k", st.n)
		case "level":
			d, err = at.Level(ctx, "k")
		case "peek":
			d, err = at.Peek(ctx, "k")
		case "reserve":
			var r *sluice.Reservation
			if r, err = at.ReserveN(ctx, "k", st.n, time.Second); err == nil {
				d = r.Decision
			}
		}
		if err != nil {
			t.Fatalf("step %d: %s(t0+%v, %d): %v", i, st.verb, st.at, st.n, err)
		}
		if d.Allowed != st.allowed || d.Admitted != st.admitted || d.Remaining != st.remaining || d.Level.Tokens() != st.level ||
			d.RetryAfter != st.retry || d.Delay != st.delay || d.At != t0.Add(st.decided) {
			t.Errorf("step %d: %s(t0+%v, %d) = allowed %v, admitted %d, remaining %d, level %v, retry %v, delay %v, at t0+%v;\n"+
				"want %v, %d, %d, %v, %v, %v, at t0+%v",
				i, st.verb, st.at, st.n, d.Allowed, d.Admitted, d.Remaining, d.Level, d.RetryAfter, d.Delay, d.At.Sub(t0),
				st.allowed, st.admitted, st.remaining, st.level, st.retry, st.delay, st.decided)
		}
	}
	if n := c.calls.Load(); n != 12 {
		t.Errorf("%d store calls for 12 steps, want one each", n)
	}
	// The limiter At came from decides on the store's clock: a fresh key
	// in 1999, reported to the microsecond.
	clock = clock.Add(1234567 * time.Nanosecond)
	d, err := lim.Level(ctx, "other")
	if err != nil || d.Level.Tokens() != 4 || d.At != clock.Truncate(time.Microsecond) {
		t.Errorf("Level on the store's clock = %+v, %v; want 4 tokens at %v", d, err, clock.Truncate(time.Microsecond))
	}
}

// TestAtBadInput checks the errors of decisions at an instant: instants
// outside 1970 to 2112 or the zero Time, partial admissions of less than
// 1, and waits at a fixed instant, through a Limiter and a Stack; none
// charges anything.
func TestAtBadInput(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	lim, c := newLimiter(t, nil, algorithms.GCRA, core.PerSecond(10))
	stack, err := sluice.NewStack(c,
		sluice.Rule{Name: "user", Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(10)},
		sluice.Rule{Name: "all", Algorithm: algorithms.SlidingWindowLog, Limit: core.PerSecond(50)},
	)
	if err != nil {
		t.Fatal(err)
	}
	one, err := sluice.NewStack(c, sluice.Rule{Name: "one", Algorithm: algorithms.GCRA, Limit: core.PerSecond(10)})
	if err != nil {
		t.Fatal(err)
	}
	conc, err := sluice.NewLimiter(c, algorithms.Concurrency, core.Per(5, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	keys := []string{"u", "all"}
	before1970, after2112 := time.Unix(-1, 999_999_999), time.Date(2112, 12, 31, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"AllowN before 1970", func() error { _, err := lim.At(before1970).AllowN(ctx, "k", 1); return err }, core.ErrInvalidTime},
		{"Level after 2112", func() error { _, err := lim.At(after2112).Level(ctx, "k"); return err }, core.ErrInvalidTime},
		{"Peek at the zero time", func() error { _, err := lim.At(time.Time{}).Peek(ctx, "k"); return err }, core.ErrInvalidTime},
		{"ReserveN at the zero time", func() error { _, err := lim.At(time.Time{}).ReserveN(ctx, "k", 1, time.Second); return err }, core.ErrInvalidTime},
		{"AcquireN at the zero time", func() error { _, err := conc.At(time.Time{}).AcquireN(ctx, "k", 1); return err }, core.ErrInvalidTime},
		{"AllowAtMost of 0", func() error { _, err := lim.At(t0).AllowAtMost(ctx, "k", 0); return err }, core.ErrInvalidCost},
		{"AllowAtMost of -1", func() error { _, err := lim.AllowAtMost(ctx, "k", -1); return err }, core.ErrInvalidCost},
		{"AllowAtMost of more than 2^52", func() error { _, err := lim.AllowAtMost(ctx, "k", core.MaxUnits+1); return err }, core.ErrInvalidCost},
		{"AllowAtMost of leases", func() error { _, err := conc.AllowAtMost(ctx, "k", 1); return err }, core.ErrUnsupported},
		{"Wait at an instant", func() error { _, err := lim.At(t0).Wait(ctx, "k"); return err }, core.ErrInvalidRequest},
		{"stack AllowN before 1970", func() error { _, err := stack.At(before1970).AllowN(ctx, keys, 1); return err }, core.ErrInvalidTime},
		{"stack Level at the zero time", func() error { _, err := stack.At(time.Time{}).Level(ctx, keys...); return err }, core.ErrInvalidTime},
		{"one-rule stack AllowN at the zero time", func() error { _, err := one.At(time.Time{}).AllowN(ctx, []string{"k"}, 1); return err }, core.ErrInvalidTime},
		{"stack AllowAtMost of 0", func() error { _, err := stack.AllowAtMost(ctx, keys, 0); return err }, core.ErrInvalidCost},
		{"stack AllowAtMost of -5", func() error { _, err := stack.At(t0).AllowAtMost(ctx, keys, -5); return err }, core.ErrInvalidCost},
		{"stack Wait at an instant", func() error { _, err := stack.At(t0).Wait(ctx, keys...); return err }, core.ErrInvalidRequest},
	} {
		if err := tc.call(); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
	// Nothing was charged.
	if d, err := lim.At(t0).Level(ctx, "k"); err != nil || d.Remaining != 10 {
		t.Errorf("Level(k) after bad calls = %+v, %v; want 10 left", d, err)
	}
	if v, err := stack.At(t0).Level(ctx, keys...); err != nil || v.Rules()[0].Remaining != 10 || v.Rules()[1].Remaining != 50 {
		t.Errorf("stack Level after bad calls = %+v, %v; want 10 and 50 left", v, err)
	}
}

// TestAtKeepsTheLimiter checks that At copies: the limiter it came from
// keeps the store's clock, a limiter made from the copy keeps its
// instant, and the copy keeps the queue and the limit source of the one
// it came from.
func TestAtKeepsTheLimiter(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC)
	base, _ := newLimiter(t, func() time.Time { return clock }, algorithms.TokenBucket, core.PerSecond(2))
	ctx := context.Background()
	src := &source{}
	src.set(core.PerSecond(7))
	following, err := base.Following(src)
	if err != nil {
		t.Fatal(err)
	}
	at := following.At(t0)
	queued, err := at.WithQueue(3)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		lim   *sluice.Limiter
		when  time.Time
		limit int64
	}{
		{"base", base, clock, 2},
		{"following", following, clock, 7},
		{"following at t0", at, t0, 7},
		{"queued at t0", queued, t0, 7},
		{"queued at t0+1s", queued.At(t0.Add(time.Second)), t0.Add(time.Second), 7},
	} {
		d, err := tc.lim.Level(ctx, "k:"+tc.name)
		if err != nil || d.At != tc.when || d.Limit != tc.limit {
			t.Errorf("%s: Level = %+v, %v; want limit %d at %v", tc.name, d, err, tc.limit, tc.when)
		}
	}
	if queued.Queue() != 3 || at.Queue() != 0 || at.Limit() != core.PerSecond(7) {
		t.Errorf("queues %d and %d, limit %v; want 3, 0 and the source's", queued.Queue(), at.Queue(), at.Limit())
	}
	// A reservation made at t0 is cancelled at t0: the capacity is back
	// as if it had never been taken.
	r, err := at.ReserveN(ctx, "r", 7, time.Second)
	if err != nil || !r.OK() {
		t.Fatalf("ReserveN(t0, 7) = %+v, %v; want reserved", r, err)
	}
	if err := r.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	if d, err := at.Level(ctx, "r"); err != nil || d.Level.Tokens() != 7 || d.At != t0 {
		t.Errorf("Level(t0) after Cancel = %+v, %v; want 7 tokens at t0", d, err)
	}
}

// TestAllowAtMostInf checks that a partial admission under Inf admits
// the whole cost, without the store, at the call's instant.
func TestAllowAtMostInf(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	lim, _ := newLimiter(t, nil, algorithms.TokenBucket, core.Inf)
	d, err := lim.At(t0).AllowAtMost(context.Background(), "k", 1<<40)
	if err != nil || !d.Allowed || d.Admitted != 1<<40 || d.At != t0 || d.Level != (core.Level{Units: math.MaxInt64, PerToken: 1}) {
		t.Errorf("AllowAtMost(2^40) under Inf = %+v, %v; want all admitted at t0", d, err)
	}
}

// TestStackAllowAtMost runs a per-user token bucket and a tenant-wide
// fixed window through AllowAtMost, on the memory store (one atomic
// batch) and on a store that decides batches in turn: each call charges
// both rules the most both admit, or neither.
func TestStackAllowAtMost(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, atomic := range []bool{true, false} {
		_, c := newLimiter(t, nil, algorithms.TokenBucket, core.PerSecond(1))
		var store core.Store = c
		if !atomic {
			store = inTurn{c}
		}
		stack, err := sluice.NewStack(store,
			sluice.Rule{Name: "user", Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(4).WithBurst(6)},
			sluice.Rule{Name: "tenant", Algorithm: algorithms.FixedWindow, Limit: core.PerSecond(10)},
		)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		ms := time.Millisecond
		for i, st := range []struct {
			at       time.Duration
			user     string
			n        int64
			allowed  bool
			admitted int64
			binding  string
			levels   [2]float64
		}{
			{0, "u1", 4, true, 4, "user", [2]float64{2, 6}},
			{0, "u1", 4, true, 2, "user", [2]float64{0, 4}},
			{0, "u2", 9, true, 4, "tenant", [2]float64{2, 0}},
			// The tenant has nothing left: u2's bucket keeps its 2.
			{0, "u2", 1, false, 0, "tenant", [2]float64{1, 0}},
			{500 * ms, "u1", 9, false, 0, "tenant", [2]float64{1, 0}},
			{time.Second, "u1", 9, true, 4, "user", [2]float64{0, 6}},
			// Half a token: the user has nothing whole, the tenant 6.
			{1125 * ms, "u1", 3, false, 0, "user", [2]float64{0.5, 5}},
			{1250 * ms, "u1", 3, true, 1, "user", [2]float64{0, 5}},
		} {
			v, err := stack.At(t0.Add(st.at)).AllowAtMost(ctx, []string{st.user, "tenant"}, st.n)
			if err != nil {
				t.Fatalf("atomic %v, step %d: %v", atomic, i, err)
			}
			got := stack.Rules()[v.Binding].Name
			levels := [2]float64{v.Rules()[0].Level.Tokens(), v.Rules()[1].Level.Tokens()}
			if v.Allowed != st.allowed || v.Admitted != st.admitted || got != st.binding || levels != st.levels || v.At != t0.Add(st.at) {
				t.Errorf("atomic %v, step %d: AllowAtMost(t0+%v, %s, %d) = allowed %v, admitted %d, binding %s, levels %v, at t0+%v; want %v, %d, %s, %v",
					atomic, i, st.at, st.user, st.n, v.Allowed, v.Admitted, got, levels, v.At.Sub(t0), st.allowed, st.admitted, st.binding, st.levels)
			}
			for r, d := range v.Rules() {
				if want := map[bool]int64{true: st.admitted, false: 0}[d.Allowed]; v.Allowed && d.Admitted != want {
					t.Errorf("atomic %v, step %d: rule %d admitted %d, want %d like every rule", atomic, i, r, d.Admitted, want)
				}
			}
		}
		if atomic && c.batches.Load() != c.calls.Load() {
			t.Errorf("an atomic store got %d calls for %d batches: a partial admission of a stack must be one ApplyAll", c.calls.Load(), c.batches.Load())
		}
	}
}

// TestApplyInTurnAtMost checks the fallback of a store that cannot batch:
// a batch of partial admissions probes every request, then charges the
// least cost every request admits, reporting it as Admitted, and charges
// nothing when one admits nothing.
func TestApplyInTurnAtMost(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	_, c := newLimiter(t, nil, algorithms.TokenBucket, core.PerSecond(1))
	a := core.Named(algorithms.TokenBucket, "a")
	b := core.Named(algorithms.SlidingWindowCounter, "b")
	reqs := []core.Request{
		{Key: "k", Cost: 4, Op: core.OpAtMost, Terms: &core.Terms{Algorithm: a, Limit: core.PerSecond(5), Now: t0}},
		{Key: "k", Cost: 9, Op: core.OpAtMost, Terms: &core.Terms{Algorithm: b, Limit: core.PerSecond(3), Now: t0}},
		{Key: "k", Cost: 7, Op: core.OpAtMost, Terms: &core.Terms{Algorithm: algorithms.GCRA, Limit: core.Inf, Now: t0}},
	}
	out := make([]core.Decision, len(reqs))
	ctx := context.Background()
	for i, want := range []struct {
		allowed  bool
		admitted [3]int64
	}{
		{true, [3]int64{3, 3, 7}}, // the window's 3 bind
		{false, [3]int64{1, 0, 7}},
	} {
		if err := stores.ApplyInTurn(ctx, c, reqs, out); err != nil {
			t.Fatal(err)
		}
		admitted := [3]int64{out[0].Admitted, out[1].Admitted, out[2].Admitted}
		if out[0].Allowed && out[1].Allowed != want.allowed || admitted != want.admitted {
			t.Errorf("batch %d = %+v; want allowed %v, admitted %v", i, out, want.allowed, want.admitted)
		}
	}
	// The denied batch charged nothing: the bucket has 2 left.
	if d, err := c.Apply(ctx, core.Request{Key: "k", Op: core.OpPeek, Terms: &core.Terms{Algorithm: a, Limit: core.PerSecond(5), Now: t0}}); err != nil || d.Remaining != 2 {
		t.Errorf("the bucket after a denied batch = %+v, %v; want 2 left", d, err)
	}
}

// TestLevel checks Level's arithmetic and formatting.
func TestLevel(t *testing.T) {
	for _, tc := range []struct {
		l      core.Level
		tokens float64
		s      string
		known  bool
	}{
		{core.Level{}, 0, "unknown", false},
		{core.Level{Units: 6, PerToken: 3}, 2, "2", true},
		{core.Level{Units: -3, PerToken: 2}, -1.5, "-1.5", true},
		{core.Level{Units: 1, PerToken: 3}, 1.0 / 3, "0.3333333333333333", true},
		{core.Level{Units: math.MaxInt64, PerToken: 1}, math.MaxInt64, "9223372036854775807", true},
		{core.Level{Units: core.MaxExact, PerToken: core.MaxExact - 1}, 1 + 1.0/(core.MaxExact-1), "1.0000000000000002", true},
	} {
		if got := tc.l.Tokens(); got != tc.tokens {
			t.Errorf("%#v.Tokens() = %v, want %v", tc.l, got, tc.tokens)
		}
		if got := tc.l.String(); got != tc.s {
			t.Errorf("%#v.String() = %q, want %q", tc.l, got, tc.s)
		}
		if got := tc.l.Known(); got != tc.known {
			t.Errorf("%#v.Known() = %v, want %v", tc.l, got, tc.known)
		}
	}
}

// TestRequestAnswer checks the instant and the admission of a decision a
// decorator makes itself.
func TestRequestAnswer(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	req := core.Request{Cost: 5, Op: core.OpAtMost, Terms: &core.Terms{Now: t0.Add(999 * time.Nanosecond)}}
	if d := req.Answer(core.Decision{Allowed: true}); d.At != t0 || d.Admitted != 5 {
		t.Errorf("Answer(allowed) = %+v; want all 5 admitted at t0", d)
	}
	if d := req.Answer(core.Decision{}); d.At != t0 || d.Admitted != 0 {
		t.Errorf("Answer(denied) = %+v; want nothing admitted at t0", d)
	}
	req.Now, req.Op = time.Time{}, core.OpCharge
	before := time.Now().Truncate(time.Microsecond)
	d := req.Answer(core.Decision{Allowed: true})
	if d.At.Before(before) || d.At.After(time.Now()) || d.At.Location() != time.UTC || d.Admitted != 0 {
		t.Errorf("Answer on the local clock = %+v; want now, in UTC, and no Admitted for a charge", d)
	}
}
