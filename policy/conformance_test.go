package policy

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores/memstore"
	"github.com/sluicehq/sluice/stores/storetest"
)

// patient are breaker options for a healthy in-process store on a loaded
// test machine: no call may reach the per-call deadline, or it would get
// the mode's answer instead of the store's.
var patient = []BreakerOption{WithTimeout(time.Minute)}

// newMem returns an in-process store, closed when t ends.
func newMem(t *testing.T) *memstore.Store {
	t.Helper()
	mem, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	return mem
}

// ownedView is a View with the Close of its owner, who closes the breaker
// the view shares (a View's own Close does nothing).
type ownedView struct{ *View }

func (v ownedView) Close() error { return v.Breaker().Close() }

// decorators are the ways the package wraps a store, each returning the
// decorated store.
var decorators = []struct {
	name string
	wrap func(t *testing.T, inner core.Store) core.Store
}{
	{"breaker", func(t *testing.T, inner core.Store) core.Store {
		return newBreaker(t, inner, patient...)
	}},
	{"view", func(t *testing.T, inner core.Store) core.Store {
		v, err := newBreaker(t, inner, patient...).WithMode(FailClosed)
		if err != nil {
			t.Fatal(err)
		}
		return ownedView{v}
	}},
	{"policy", func(t *testing.T, inner core.Store) core.Store {
		// Every option on, none of which matches the suite's keys: the
		// policy must then be transparent.
		p, err := New(inner,
			WithOverride(func(req core.Request) core.Limit { return req.Limit }),
			WithAllowList(func(key string) bool { return key == "never-allowed" }),
			WithDenyList(func(key string) bool { return key == "never-denied" }),
			WithNearLimit(0.5, func(core.Request, core.Decision) {}),
		)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}},
	{"policy-view-breaker", func(t *testing.T, inner core.Store) core.Store {
		v, err := newBreaker(t, inner, append(patient, WithMode(Degrade))...).WithMode(FailOpen)
		if err != nil {
			t.Fatal(err)
		}
		p, err := New(ownedView{v})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}},
}

// TestConformance runs the store conformance suite through each of the
// package's decorators over memstore: each must decide exactly as the
// store it wraps, batches included.
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, d := range decorators {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			storetest.Run(t, func(t *testing.T) core.Store { return d.wrap(t, newMem(t)) })
		})
	}
}

// TestStackOneCall checks that every decision of a stack of several rules
// reaches the store under each decorator as exactly one ApplyAll, and
// never as Apply: allowed, denied, peeked or reserved.
func TestStackOneCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	three := []sluice.Rule{
		{Name: "user", Algorithm: algorithms.TokenBucket, Limit: core.PerMinute(3)},
		{Name: "tenant", Algorithm: algorithms.GCRA, Limit: core.PerMinute(100)},
		{Name: "global", Algorithm: algorithms.FixedWindow, Limit: core.PerMinute(1000)},
	}
	// Reservations need rules whose algorithm reserves.
	two := []sluice.Rule{three[0], {Name: "daily", Algorithm: algorithms.TokenBucket, Limit: core.Per(1000, 24*time.Hour)}}
	for _, d := range decorators {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			counter := storetest.NewCounter(newMem(t))
			s := d.wrap(t, counter)
			stack3, err := sluice.NewStack(s, three...)
			if err != nil {
				t.Fatal(err)
			}
			stack2, err := sluice.NewStack(s, two...)
			if err != nil {
				t.Fatal(err)
			}
			for i, op := range []struct {
				name    string
				do      func() (sluice.Verdict, error)
				allowed bool
			}{
				{"Allow", func() (sluice.Verdict, error) { return stack3.Allow(ctx, "u", "t", "all") }, true},
				{"Peek", func() (sluice.Verdict, error) { return stack3.Peek(ctx, "u", "t", "all") }, true},
				{"AllowN over the user rule", func() (sluice.Verdict, error) { return stack3.AllowN(ctx, []string{"u", "t", "all"}, 3) }, false},
				{"Allow again", func() (sluice.Verdict, error) { return stack3.Allow(ctx, "u", "t", "all") }, true},
				{"ReserveN", func() (sluice.Verdict, error) {
					r, err := stack2.ReserveN(ctx, []string{"u2", "t"}, 1, time.Second)
					if err != nil {
						return sluice.Verdict{}, err
					}
					return r.Verdict, nil
				}, true},
			} {
				apply, all, _ := counter.Counts()
				v, err := op.do()
				if err != nil {
					t.Fatalf("op %d, %s: %v", i, op.name, err)
				}
				if v.Allowed != op.allowed || v.Source != core.SourceStore {
					t.Errorf("op %d, %s: allowed %v from %v, want %v from the store", i, op.name, v.Allowed, v.Source, op.allowed)
				}
				a, b, _ := counter.Counts()
				if a != apply || b != all+1 {
					t.Errorf("op %d, %s: %d Apply and %d ApplyAll calls reached the store, want 0 and 1", i, op.name, a-apply, b-all)
				}
			}
		})
	}
}
