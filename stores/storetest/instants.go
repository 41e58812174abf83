package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
)

// This file checks what a user asks through sluice.Limiter and sluice.Stack at
// instants of their own (At): a key's level (Level), partial admissions
// (AllowAtMost) and the instant each decision reports (Decision.At), on
// step tables at fixed instants from T0.

// instantStep is one call of an instants table: a verb at T0+at and what
// its decision must hold.
type instantStep struct {
	at   time.Duration
	verb string // "allow", "peek", "level", "at-most" or "reserve" (within a second)
	n    int64

	allowed   bool
	admitted  int64
	remaining int64
	level     float64       // in tokens
	retry     time.Duration // RetryAfter
	delay     time.Duration // an admitted reservation's Delay
	// decided is when the decision is made, from T0, if not at: the key's
	// last charge, when the clock stepped back behind it.
	decided time.Duration
}

// instantTables are the instants tables, by algorithm, each under its
// limit.
var instantTables = map[string]struct {
	limit core.Limit
	steps []instantStep
}{
	"token-bucket": {core.PerSecond(10).WithBurst(5), bucketInstants},
	"gcra":         {core.PerSecond(10).WithBurst(5), bucketInstants},
	"fixed-window": {core.PerSecond(3), []instantStep{
		{at: 0, verb: "level", allowed: true, remaining: 3, level: 3},
		{at: 0, verb: "at-most", n: 2, allowed: true, admitted: 2, remaining: 1, level: 1},
		{at: 500 * ms, verb: "at-most", n: 5, allowed: true, admitted: 1, remaining: 0, level: 0},
		{at: 900 * ms, verb: "at-most", n: 1, retry: 100 * ms},
		{at: time.Second, verb: "level", allowed: true, remaining: 3, level: 3},
		{at: time.Second, verb: "at-most", n: 4, allowed: true, admitted: 3, remaining: 0, level: 0},
		// A clock behind the last charge reads the last charge's instant.
		{at: 500 * ms, verb: "level", allowed: true, decided: time.Second},
		// A peek looks at a cost of 1, and reports the level after it.
		{at: 2500 * ms, verb: "peek", n: 1, allowed: true, remaining: 2, level: 2},
	}},
	"sliding-window-counter": {core.PerSecond(4), []instantStep{
		{at: 0, verb: "allow", n: 4, allowed: true},
		// At 1.25s the previous window's 4 weigh 4 × 0.75 = 3; at 1.3s,
		// 2.8: a level of 1.2 tokens, of which one is admitted.
		{at: 1250 * ms, verb: "level", allowed: true, remaining: 1, level: 1},
		{at: 1300 * ms, verb: "level", allowed: true, remaining: 1, level: 1.2},
		{at: 1300 * ms, verb: "at-most", n: 3, allowed: true, admitted: 1, remaining: 0, level: 0.2},
		// The next one fits once the previous window weighs 2, at 1.5s.
		{at: 1300 * ms, verb: "at-most", n: 2, level: 0.2, retry: 200 * ms},
		{at: 1500 * ms, verb: "level", allowed: true, remaining: 1, level: 1},
		{at: 1200 * ms, verb: "level", allowed: true, level: 0.2, decided: 1300 * ms},
	}},
	"sliding-window-log": {core.PerSecond(3), []instantStep{
		{at: 0, verb: "at-most", n: 2, allowed: true, admitted: 2, remaining: 1, level: 1},
		{at: 100 * ms, verb: "at-most", n: 2, allowed: true, admitted: 1, remaining: 0, level: 0},
		// The charges at 0 leave the window (t−1s, t] at t = 1s.
		{at: 500 * ms, verb: "at-most", n: 1, retry: 500 * ms},
		{at: time.Second, verb: "level", allowed: true, remaining: 2, level: 2},
		{at: time.Second, verb: "at-most", n: 3, allowed: true, admitted: 2, remaining: 0, level: 0},
		{at: 999 * ms, verb: "allow", n: 1, retry: 100 * ms, decided: time.Second},
	}},
}

const ms = time.Millisecond

// bucketInstants hold for the token bucket and GCRA alike: a token every
// 100ms, at most 5 at once.
var bucketInstants = []instantStep{
	{at: 0, verb: "level", allowed: true, remaining: 5, level: 5},
	{at: 0, verb: "at-most", n: 3, allowed: true, admitted: 3, remaining: 2, level: 2},
	{at: 0, verb: "at-most", n: 4, allowed: true, admitted: 2, remaining: 0, level: 0},
	// Nothing fits: denied as a cost of 1 is, with its wait.
	{at: 0, verb: "at-most", n: 1, retry: 100 * ms},
	// Half a token in 50ms.
	{at: 50 * ms, verb: "level", allowed: true, remaining: 0, level: 0.5},
	{at: 50 * ms, verb: "allow", n: 1, level: 0.5, retry: 50 * ms},
	{at: 250 * ms, verb: "at-most", n: 5, allowed: true, admitted: 2, remaining: 0, level: 0.5},
	// A clock behind the last charge reads the last charge's instant.
	{at: 100 * ms, verb: "level", allowed: true, level: 0.5, decided: 250 * ms},
	{at: 10 * time.Second, verb: "level", allowed: true, remaining: 5, level: 5},
	{at: 10 * time.Second, verb: "peek", n: 1, allowed: true, remaining: 4, level: 4},
	{at: 10 * time.Second, verb: "allow", n: 5, allowed: true, remaining: 0, level: 0},
	// A reservation takes the level below zero; the debt refills.
	{at: 10 * time.Second, verb: "reserve", n: 2, allowed: true, level: -2, delay: 200 * ms},
	{at: 10*time.Second + 50*ms, verb: "level", allowed: true, level: -1.5},
	{at: 10*time.Second + 50*ms, verb: "at-most", n: 3, level: -1.5, retry: 250 * ms},
	{at: 10*time.Second + 300*ms, verb: "at-most", n: 3, allowed: true, admitted: 1, level: 0},
}

// testInstants runs alg's instants table through a sluice.Limiter over the
// store, each call at its instant (Limiter.At): levels, partial
// admissions and the instant of every decision.
func testInstants(t *testing.T, s core.Store, alg core.Algorithm) {
	table, ok := instantTables[alg.Name()]
	if !ok {
		t.Fatalf("no instants table for %s", alg.Name())
	}
	lim, err := sluice.NewLimiter(s, alg, table.limit)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := newKey(t)
	for i, st := range table.steps {
		at := lim.At(T0.Add(st.at))
		var d core.Decision
		var err error
		switch st.verb {
		case "allow":
			d, err = at.AllowN(ctx, key, st.n)
		case "peek":
			d, err = at.Peek(ctx, key)
		case "level":
			d, err = at.Level(ctx, key)
		case "at-most":
			d, err = at.AllowAtMost(ctx, key, st.n)
		case "reserve":
			var r *sluice.Reservation
			if r, err = at.ReserveN(ctx, key, st.n, time.Second); err == nil {
				d = r.Decision
			}
		default:
			t.Fatalf("step %d: unknown verb %q", i, st.verb)
		}
		call := st.verb + "(T0+" + st.at.String() + ")"
		if err != nil {
			t.Fatalf("step %d: %s n=%d: %v", i, call, st.n, err)
		}
		decided := st.at
		if st.decided != 0 {
			decided = st.decided
		}
		if d.Allowed != st.allowed || d.Admitted != st.admitted || d.Remaining != st.remaining || d.Level.Tokens() != st.level ||
			d.RetryAfter != st.retry || d.Delay != st.delay || !d.At.Equal(T0.Add(decided)) {
			t.Errorf("step %d: %s n=%d = allowed %v, admitted %d, remaining %d, level %v, retry %v, delay %v, at T0+%v;\n"+
				"want %v, %d, %d, %v, %v, %v, at T0+%v",
				i, call, st.n, d.Allowed, d.Admitted, d.Remaining, d.Level, d.RetryAfter, d.Delay, d.At.Sub(T0),
				st.allowed, st.admitted, st.remaining, st.level, st.retry, st.delay, decided)
		}
	}
}

// testInstantsCommon checks what holds for every algorithm at an instant
// of the caller's: an instant between two microseconds is decided at the
// earlier, which the decision reports; instants outside 1970 to 2112 and
// partial admissions of less than 1 fail with the core sentinels, through
// the user types as at the store; the concurrency algorithm reports its
// free slots as its level and admits nothing in part.
func testInstantsCommon(t *testing.T, s core.Store) {
	ctx := context.Background()
	lim, err := sluice.NewLimiter(s, algorithms.TokenBucket, core.PerSecond(10))
	if err != nil {
		t.Fatal(err)
	}
	key := newKey(t)
	d, err := lim.At(T0.Add(1999*time.Nanosecond)).AllowN(ctx, key, 1)
	if err != nil || !d.Allowed || !d.At.Equal(T0.Add(time.Microsecond)) {
		t.Errorf("AllowN(T0+1.999µs) = %+v, %v; want allowed at T0+1µs, rounded down", d, err)
	}
	if d.At.Location() != time.UTC {
		t.Errorf("Decision.At is in %v, want UTC", d.At.Location())
	}
	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"AllowN before 1970", func() error { _, err := lim.At(time.Unix(-1, 0)).AllowN(ctx, key, 1); return err }, core.ErrInvalidTime},
		{"Level after 2112", func() error {
			_, err := lim.At(time.Date(2113, 1, 1, 0, 0, 0, 0, time.UTC)).Level(ctx, key)
			return err
		}, core.ErrInvalidTime},
		{"AllowAtMost at the zero time", func() error { _, err := lim.At(time.Time{}).AllowAtMost(ctx, key, 1); return err }, core.ErrInvalidTime},
		{"AllowAtMost of 0", func() error { _, err := lim.At(T0).AllowAtMost(ctx, key, 0); return err }, core.ErrInvalidCost},
		{"AllowAtMost of -3", func() error { _, err := lim.At(T0).AllowAtMost(ctx, key, -3); return err }, core.ErrInvalidCost},
		{"at-most request of 0", func() error {
			_, err := s.Apply(ctx, core.Request{Key: key, Op: core.OpAtMost, Terms: &core.Terms{Algorithm: algorithms.GCRA, Limit: core.PerSecond(1), Now: T0}})
			return err
		}, core.ErrInvalidCost},
		{"at-most request of a concurrency limit", func() error {
			_, err := s.Apply(ctx, core.Request{Key: key, Cost: 1, Op: core.OpAtMost, Terms: &core.Terms{Algorithm: algorithms.Concurrency, Limit: core.PerSecond(1), Now: T0}})
			return err
		}, core.ErrUnsupported},
		{"Wait at an instant", func() error { _, err := lim.At(T0).Wait(ctx, key); return err }, core.ErrInvalidRequest},
	} {
		if err := tc.call(); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
	// Nothing above charged the key: the level at T0+1µs is as the first
	// call left it.
	if d, err := lim.At(T0.Add(time.Microsecond)).Level(ctx, key); err != nil || d.Level.Tokens() != 9 || d.Remaining != 9 {
		t.Errorf("Level(T0+1µs) after bad calls = %+v, %v; want 9 tokens", d, err)
	}

	// A concurrency limit's level is its free slots.
	conc, err := sluice.NewLimiter(s, algorithms.Concurrency, core.Per(3, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	key = newKey(t)
	l, err := conc.At(T0).AcquireN(ctx, key, 2)
	if err != nil || !l.OK() {
		t.Fatalf("AcquireN(T0, 2) = %+v, %v; want acquired", l, err)
	}
	if d, err := conc.At(T0.Add(time.Second)).Level(ctx, key); err != nil || d.Level != (core.Level{Units: 1, PerToken: 1}) || !d.At.Equal(T0.Add(time.Second)) {
		t.Errorf("concurrency Level(T0+1s) = %+v, %v; want 1 slot free at T0+1s", d, err)
	}
	if _, err := conc.At(T0).AllowAtMost(ctx, key, 1); !errors.Is(err, core.ErrUnsupported) {
		t.Errorf("concurrency AllowAtMost = %v, want ErrUnsupported", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if d, err := conc.At(T0.Add(time.Second)).Level(ctx, key); err != nil || d.Level.Tokens() != 3 {
		t.Errorf("concurrency Level(T0+1s) after Release = %+v, %v; want 3 slots free", d, err)
	}
}

// testBatchAtMost runs a stack of a token bucket and a fixed window
// through sluice.Stack at fixed instants (Stack.At): a partial admission
// charges every rule the most all of them admit, or none, in one store
// call; the rules' levels read together; each rule's decision matches the
// reference's.
func testBatchAtMost(t *testing.T, s core.Store) {
	for name, rules := range layouts(t, []core.Algorithm{algorithms.TokenBucket, algorithms.FixedWindow},
		[]core.Limit{core.PerSecond(10).WithBurst(5), core.PerSecond(8)}) {
		t.Run(name, func(t *testing.T) {
			ref := make(reference)
			stack, err := sluice.NewStack(s,
				sluice.Rule{Name: "bucket", Algorithm: rules[0].alg, Limit: rules[0].limit},
				sluice.Rule{Name: "window", Algorithm: rules[1].alg, Limit: rules[1].limit},
			)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			keys := []string{rules[0].key, rules[1].key}
			for i, st := range []struct {
				at       time.Duration
				level    bool // Level instead of AllowAtMost
				n        int64
				allowed  bool
				admitted int64
				binding  int
				levels   [2]float64
			}{
				{at: 0, n: 3, allowed: true, admitted: 3, binding: 0, levels: [2]float64{2, 5}},
				// The bucket has 2 left, the window 5: both are charged 2.
				{at: 0, n: 3, allowed: true, admitted: 2, binding: 0, levels: [2]float64{0, 3}},
				// The bucket has none: neither rule is charged, the window
				// reporting what it would have had.
				{at: 0, n: 2, binding: 0, levels: [2]float64{0, 2}},
				{at: 500 * ms, level: true, allowed: true, binding: 1, levels: [2]float64{5, 3}},
				{at: 500 * ms, n: 9, allowed: true, admitted: 3, binding: 1, levels: [2]float64{2, 0}},
				{at: 600 * ms, n: 2, binding: 1, levels: [2]float64{2, 0}},
				{at: 600 * ms, level: true, allowed: true, binding: 1, levels: [2]float64{3, 0}},
				// A new window.
				{at: time.Second, n: 9, allowed: true, admitted: 5, binding: 0, levels: [2]float64{0, 3}},
				{at: 1050 * ms, level: true, allowed: true, binding: 0, levels: [2]float64{0.5, 3}},
			} {
				at := stack.At(T0.Add(st.at))
				var v sluice.Verdict
				what := "AllowAtMost"
				if st.level {
					what = "Level"
					v, err = at.Level(ctx, keys...)
				} else {
					v, err = at.AllowAtMost(ctx, keys, st.n)
				}
				if err != nil {
					t.Fatalf("step %d: %s(T0+%v, %d): %v", i, what, st.at, st.n, err)
				}
				levels := [2]float64{v.Rules()[0].Level.Tokens(), v.Rules()[1].Level.Tokens()}
				if v.Allowed != st.allowed || v.Admitted != st.admitted || v.Binding != st.binding || levels != st.levels || !v.At.Equal(T0.Add(st.at)) {
					t.Errorf("step %d: %s(T0+%v, %d) = allowed %v, admitted %d, binding %d, levels %v, at T0+%v; want %v, %d, %d, %v, at T0+%v",
						i, what, st.at, st.n, v.Allowed, v.Admitted, v.Binding, levels, v.At.Sub(T0), st.allowed, st.admitted, st.binding, st.levels, st.at)
				}
				// The same requests decided by the specification.
				op, n := core.OpAtMost, st.n
				if st.level {
					op, n = core.OpPeek, 0
				}
				reqs := batch(rules, op, n, T0.Add(st.at))
				want := ref.decide(reqs)
				for r := range want {
					if !sameDecision(v.Rules()[r], want[r]) {
						t.Errorf("step %d: rule %d:\n got %+v\nwant %+v", i, r, v.Rules()[r], want[r])
					}
				}
			}
		})
	}
}
