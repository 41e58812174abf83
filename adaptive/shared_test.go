package adaptive_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/core"
)

// TestSharedLimitSteps runs the Go transition through a table at fixed
// instants: 1 s intervals (writes accepted 750 ms apart), a 10 s TTL.
func TestSharedLimitSteps(t *testing.T) {
	t.Parallel()
	limit := core.Per(10, 10*time.Second).WithBurst(1)
	const t0 = int64(1_900_000_000_000_000)
	var s core.State
	steps := []struct {
		at   int64 // µs after t0
		op   core.Op
		cost int64
		want core.Decision
	}{
		{0, core.OpPeek, 1, core.Decision{}},
		{0, core.OpCharge, 5000, core.Decision{Allowed: true, Limit: 5000, Remaining: 1, ResetAfter: 10 * time.Second}},
		{100_000, core.OpCharge, 7000, core.Decision{Limit: 5000, Remaining: 1, RetryAfter: 650 * time.Millisecond, ResetAfter: 9900 * time.Millisecond}},
		{749_999, core.OpCharge, 7000, core.Decision{Limit: 5000, Remaining: 1, RetryAfter: time.Microsecond, ResetAfter: 9_250_001 * time.Microsecond}},
		{750_000, core.OpCharge, 7000, core.Decision{Allowed: true, Limit: 7000, Remaining: 2, ResetAfter: 10 * time.Second}},
		{500_000, core.OpCharge, 9000, core.Decision{Limit: 7000, Remaining: 2, RetryAfter: 750 * time.Millisecond, ResetAfter: 10 * time.Second}}, // a clock behind: decided at the write's instant
		{2_000_000, core.OpPeek, 1, core.Decision{Limit: 7000, Remaining: 2, ResetAfter: 8750 * time.Millisecond}},
		{10_750_000, core.OpPeek, 1, core.Decision{}}, // forgotten at E
		{10_750_000, core.OpCharge, 3000, core.Decision{Allowed: true, Limit: 3000, Remaining: 1, ResetAfter: 10 * time.Second}},
	}
	for i, st := range steps {
		got := adaptive.SharedLimit.Transition(&s, core.Step{Now: t0 + st.at, Cost: st.cost, Limit: limit, Op: st.op})
		if got != st.want {
			t.Errorf("step %d: %v cost %d at t0+%dµs = %+v, want %+v", i, st.op, st.cost, st.at, got, st.want)
		}
	}
	if err := adaptive.SharedLimit.Validate(core.Per(3, 10*time.Second)); err == nil {
		t.Error("Validate accepted a rate that does not divide the period in µs")
	}
}
