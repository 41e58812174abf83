package core_test

import (
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
