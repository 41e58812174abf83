package core_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
)

// TestStackSteps runs a burst limit and a daily quota on one user, under
// a tenant-wide limit, on the memory store (atomic) and on a store that
// charges in turn and refunds.
func TestStackSteps(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, atomic := range []bool{true, false} {
		clock := t0
		_, c := newLimiter(t, func() time.Time { return clock }, algorithms.TokenBucket, core.PerSecond(1))
		var store core.Store = c.Store
		if !atomic {
			store = core.StoreFunc(c.Store.Apply) // hides ApplyAll
		}
		stack, err := core.NewStack(store,
			core.Rule{Name: "burst", Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(2).WithBurst(3)},
			core.Rule{Name: "daily", Algorithm: algorithms.TokenBucket, Limit: core.PerDay(5)},
			core.Rule{Name: "tenant", Algorithm: algorithms.FixedWindow, Limit: core.PerSecond(4)},
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
					atomic, i, st.at, st.user, st.n, v.Allowed, got, v.RetryAfter, st.allowed, st.binding, st.retry, v.Rules)
			}
		}
	}
}

func TestNewStack(t *testing.T) {
	s, _ := newLimiter(t, nil, algorithms.TokenBucket, core.PerSecond(1))
	store := s.Store()
	tb := algorithms.TokenBucket
	for _, tc := range []struct {
		rules []core.Rule
		want  error
	}{
		{nil, core.ErrInvalidRequest},
		{[]core.Rule{{Name: "", Algorithm: tb, Limit: core.PerSecond(1)}}, core.ErrInvalidRequest},
		{[]core.Rule{{Name: "a:b", Algorithm: tb, Limit: core.PerSecond(1)}}, core.ErrInvalidRequest},
		{[]core.Rule{{Name: "a", Algorithm: tb, Limit: core.PerSecond(1)}, {Name: "a", Algorithm: tb, Limit: core.PerDay(1)}}, core.ErrInvalidRequest},
		{[]core.Rule{{Name: "a", Limit: core.PerSecond(1)}}, core.ErrNoAlgorithm},
		{[]core.Rule{{Name: "a", Algorithm: tb}}, core.ErrInvalidLimit},
	} {
		if _, err := core.NewStack(store, tc.rules...); !errors.Is(err, tc.want) {
			t.Errorf("NewStack(%+v) = %v, want %v", tc.rules, err, tc.want)
		}
	}
	stack, err := core.NewStack(store, core.Rule{Name: "a", Algorithm: tb, Limit: core.PerSecond(1)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stack.Allow(context.Background(), "k", "extra"); !errors.Is(err, core.ErrInvalidRequest) {
		t.Errorf("Allow with two keys for one rule = %v, want ErrInvalidRequest", err)
	}
}

func TestApplyAllInvalid(t *testing.T) {
	s, c := newLimiter(t, nil, algorithms.TokenBucket, core.PerSecond(1))
	tb := core.Request{Key: "k", Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(1), Cost: 1}
	peek, twice, bad := tb, tb, tb
	peek.Peek = true
	bad.Cost = -1
	for _, store := range []core.Store{s.Store(), core.StoreFunc(c.Store.Apply), c.Store} { // the last a MultiStore
		for _, tc := range []struct {
			reqs []core.Request
			out  int
			want error
		}{
			{[]core.Request{tb}, 2, core.ErrInvalidRequest},
			{[]core.Request{tb, peek}, 2, core.ErrInvalidRequest},
			{[]core.Request{tb, twice}, 2, core.ErrInvalidRequest},
			{[]core.Request{tb, bad}, 2, core.ErrInvalidCost},
		} {
			if err := core.ApplyAll(context.Background(), store, tc.reqs, make([]core.Decision, tc.out)); !errors.Is(err, tc.want) {
				t.Errorf("ApplyAll(%+v) = %v, want %v", tc.reqs, err, tc.want)
			}
		}
	}
	if c.calls.Load() != 0 {
		t.Errorf("invalid requests reached the store %d times", c.calls.Load())
	}
}
