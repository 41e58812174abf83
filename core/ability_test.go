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
		name              string
		alg               core.Algorithm
		reserves, leases  bool
		batch             int64
		windowed, scripts bool
	}{
		{"token bucket", tb, true, false, 5, false, true},
		{"named token bucket", core.Named(tb, "rule"), true, false, 5, false, true},
		{"named twice", twice, true, false, 5, false, true},
		{"named concurrency", core.Named(conc, "rule"), false, true, 0, false, true},
		{"named fixed window", core.Named(fw, "rule"), false, false, 10, true, true},
		{"named sliding log", core.Named(algorithms.SlidingWindowLog, "rule"), false, false, 0, false, true},
		{"a wrapper without Unwrap", mine{tb}, false, false, 0, false, false},
		{"a wrapper that unwraps to itself", looped{mine{tb}}, false, false, 0, false, false},
	} {
		l := core.PerSecond(10).WithBurst(5)
		if got := core.Reserves(tc.alg); got != tc.reserves {
			t.Errorf("%s: Reserves = %v, want %v", tc.name, got, tc.reserves)
		}
		if got := core.Leases(tc.alg); got != tc.leases {
			t.Errorf("%s: Leases = %v, want %v", tc.name, got, tc.leases)
		}
		if got := core.MaxBatch(tc.alg, l); got != tc.batch {
			t.Errorf("%s: MaxBatch = %d, want %d", tc.name, got, tc.batch)
		}
		if got := core.Windowed(tc.alg); got != tc.windowed {
			t.Errorf("%s: Windowed = %v, want %v", tc.name, got, tc.windowed)
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
