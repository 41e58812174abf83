package algorithms_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
)

// t0 is the base instant of every step table, in microseconds since the
// Unix epoch. It is midnight UTC, a whole number of seconds, minutes, hours
// and days since the epoch, so windows of those lengths begin at t0.
var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()

// step is one call in a step table: a request at t0+at and the decision it
// must get. Every field of the decision is checked.
type step struct {
	at   time.Duration // since t0
	cost int64
	peek bool
	lim  core.Limit // the table's limit when zero

	allowed   bool
	remaining int64
	retry     time.Duration
	reset     time.Duration
}

// offset formats a time relative to t0 the way the failure messages name
// it: t0+1s, t0-1µs.
func offset(d time.Duration) string {
	if d < 0 {
		return "t0-" + (-d).String()
	}
	return "t0+" + d.String()
}

// name names the call a step makes, as in x/time/rate's tests:
// AllowN(t0+1s, 1), PeekN(t0+1s, 1) or AllowN(t0+1s, 1) under 4 req/s (burst 4).
func (st step) name() string {
	call := "AllowN"
	if st.peek {
		call = "PeekN"
	}
	s := fmt.Sprintf("%s(%s, %d)", call, offset(st.at), st.cost)
	if st.lim != (core.Limit{}) {
		s += " under " + st.lim.String()
	}
	return s
}

// capacity is the largest cost alg admits at once under l: the burst for
// the bucket algorithms, the rate for the window algorithms. It is what
// Decision.Limit reports.
func capacity(alg core.Algorithm, l core.Limit) int64 {
	if alg == algorithms.TokenBucket || alg == algorithms.GCRA {
		return l.Burst()
	}
	return l.Rate()
}

// runSteps applies steps in order to s with alg, each under lim unless the
// step names its own limit, and reports every field that differs.
func runSteps(t *testing.T, alg core.Algorithm, lim core.Limit, s *core.State, steps []step) {
	t.Helper()
	for i, st := range steps {
		l := lim
		if st.lim != (core.Limit{}) {
			l = st.lim
		}
		req := core.Request{Cost: st.cost, Op: peekIf(st.peek), Terms: &core.Terms{Algorithm: alg, Limit: l}}
		d := apply(alg, s, t0+st.at.Microseconds(), req)
		if d.Allowed != st.allowed {
			t.Errorf("step %d: %s = %t, want %t", i, st.name(), d.Allowed, st.allowed)
		}
		if d.Remaining != st.remaining {
			t.Errorf("step %d: %s: Remaining = %d, want %d", i, st.name(), d.Remaining, st.remaining)
		}
		if d.RetryAfter != st.retry {
			t.Errorf("step %d: %s: RetryAfter = %v, want %v", i, st.name(), d.RetryAfter, st.retry)
		}
		if d.ResetAfter != st.reset {
			t.Errorf("step %d: %s: ResetAfter = %v, want %v", i, st.name(), d.ResetAfter, st.reset)
		}
		if want := capacity(alg, l); d.Limit != want {
			t.Errorf("step %d: %s: Limit = %d, want %d", i, st.name(), d.Limit, want)
		}
		if d.Source != core.SourceStore {
			t.Errorf("step %d: %s: Source = %v, want %v", i, st.name(), d.Source, core.SourceStore)
		}
	}
}

// apply runs alg's transition for req on s at now, in microseconds since
// the Unix epoch, as a store would. Every test calls the algorithms through
// it; req.Algorithm and req.Key are not consulted.
func apply(alg core.Algorithm, s *core.State, now int64, req core.Request) core.Decision {
	return alg.Transition(s, req.Step(now))
}

// whole is the level of n whole tokens, as the window algorithms count.
func whole(n int64) core.Level { return core.Level{Units: n, PerToken: 1} }

// peekIf returns [core.OpPeek] if peek is set, else [core.OpCharge].
func peekIf(peek bool) core.Op {
	if peek {
		return core.OpPeek
	}
	return core.OpCharge
}

// admitN makes n calls of the given cost at t0+at and returns how many
// were admitted.
func admitN(alg core.Algorithm, lim core.Limit, s *core.State, at time.Duration, n int, cost int64) int {
	admitted := 0
	for range n {
		req := core.Request{Cost: cost, Terms: &core.Terms{Algorithm: alg, Limit: lim}}
		if apply(alg, s, t0+at.Microseconds(), req).Allowed {
			admitted++
		}
	}
	return admitted
}

// clone returns a deep copy of s. A State copied by value shares its Log's
// array, which the sliding window log edits in place when it admits.
func clone(s core.State) core.State {
	s.Log = slices.Clone(s.Log)
	return s
}

// sameState reports whether a and b hold the same numbers and log entries.
func sameState(a, b core.State) bool {
	return a.Last == b.Last && a.Vals == b.Vals && a.Expires == b.Expires && slices.Equal(a.Log, b.Log)
}

// relState formats s for failure messages, with Last and Expires relative
// to t0 in microseconds unless zero.
func relState(s core.State) string {
	t := "0"
	if s.Last != 0 {
		t = fmt.Sprintf("t0%+d", s.Last-t0)
	}
	e := "0"
	if s.Expires != 0 {
		e = fmt.Sprintf("t0%+d", s.Expires-t0)
	}
	return fmt.Sprintf("{Last:%s Vals:%v Expires:%s Log:%v}", t, s.Vals, e, s.Log)
}
