package core_test

import (
	"reflect"
	"testing"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
)

// looped is an algorithm whose Unwrap returns itself: AlgorithmAs must
// give up, not loop.
type looped struct{ core.Algorithm }

func (l looped) Unwrap() core.Algorithm { return l }

// mine wraps an algorithm without an Unwrap: its abilities are hidden.
type mine struct{ core.Algorithm }

// TestAlgorithmAs checks that abilities are found through wrappers that
// unwrap (a stack's rules, named twice), and only through those.
func TestAlgorithmAs(t *testing.T) {
	tb, conc, fw := algorithms.TokenBucket, algorithms.Concurrency, algorithms.FixedWindow
	twice := core.Named(core.Named(tb, "inner"), "outer")
	for _, tc := range []struct {
		name                      string
		alg                       core.Algorithm
		reserves, leases, scripts bool
	}{
		{"token bucket", tb, true, false, true},
		{"named token bucket", core.Named(tb, "rule"), true, false, true},
		{"named twice", twice, true, false, true},
		{"named concurrency", core.Named(conc, "rule"), false, true, true},
		{"named fixed window", core.Named(fw, "rule"), false, false, true},
		{"a wrapper without Unwrap", mine{tb}, false, false, false},
		{"a wrapper that unwraps to itself", looped{mine{tb}}, false, false, false},
	} {
		if got := core.Reserves(tc.alg); got != tc.reserves {
			t.Errorf("%s: Reserves = %v, want %v", tc.name, got, tc.reserves)
		}
		if got := core.Leases(tc.alg); got != tc.leases {
			t.Errorf("%s: Leases = %v, want %v", tc.name, got, tc.leases)
		}
		if got := algorithms.ScriptOf(tc.alg) != nil; got != tc.scripts {
			t.Errorf("%s: has a script = %v, want %v", tc.name, got, tc.scripts)
		}
	}
	if got := twice.Name(); got != "token-bucket/inner/outer" {
		t.Errorf("Named twice: Name = %q", got)
	}
	if algorithms.ScriptOf(twice) != algorithms.ScriptOf(tb) {
		t.Error("a named algorithm's script is not the one it names")
	}
}

// TestTransitionLooksThroughNamed checks that core.Transition decides a
// named algorithm exactly as the algorithm: the same decisions, and the
// same states after them, over charges that admit, deny and refund.
func TestTransitionLooksThroughNamed(t *testing.T) {
	l := core.PerSecond(5)
	for _, alg := range algorithms.All() {
		named := core.Named(alg, "burst")
		var plain, viaName core.State
		for i, st := range []core.Step{
			{Now: 1_000_000, Cost: 3, Limit: l},
			{Now: 1_000_001, Cost: 3, Limit: l},
			{Now: 1_100_000, Cost: 1, Limit: l, Op: core.OpRefund},
			{Now: 1_200_000, Cost: 0, Limit: l, Op: core.OpPeek},
			{Now: 2_500_000, Cost: 5, Limit: l},
		} {
			if core.Leases(alg) {
				st.Lease = int64(i + 1)
			}
			want := alg.Transition(&plain, st)
			got := core.Transition(named, &viaName, st)
			if got != want || !reflect.DeepEqual(viaName, plain) {
				t.Errorf("%s, step %d: through its name %+v and state %+v; want %+v and %+v", alg.Name(), i, got, viaName, want, plain)
			}
		}
	}
}
