package adaptive

import (
	_ "embed" // the Lua twin
	"fmt"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
)

// SharedLimit is the algorithm that keeps a fleet's adapted limit in a
// store, so that every controller given the same store and key
// ([WithShared]) agrees on one limit: a Go transition for in-process
// stores and its exact Lua twin (shared.lua) for the Redis stores, like
// every algorithm of package algorithms. A [Controller] makes its
// requests; you need it only to inspect or reset the shared state, or to
// write a store of your own.
//
// A request to it reads:
//
//   - Limit: the rate at which the shared value may be written and how
//     long it lives. A limit of n per period admits one write every
//     period/n (the control interval), and a value not written again is
//     forgotten a period after its last write (its TTL). n must divide
//     the period in µs. The controller sends [core.Per](ttl/interval, ttl).
//   - Cost: a proposed limit, in thousandths of an event per the
//     controller's period (1 to 2^52).
//   - Op: [core.OpCharge] proposes; [core.OpPeek] (or a refund) only reads.
//
// A proposal is written if there is no shared value, or if the last was
// written at least three quarters of an interval ago: the first
// controller to propose in an interval wins, and the others, which tick
// at their own instants, find it fresh and adopt it. (Three quarters, not
// a whole interval, so that a lone controller whose ticks come a little
// early is not refused every other interval.) The decision says which:
//
//   - Allowed: the proposal was written. Limit is the proposal, Remaining
//     the value's sequence number, ResetAfter the TTL.
//   - Denied, with Limit > 0: a shared value stands. Limit is it (in
//     thousandths), Remaining its sequence number (1 for the first write,
//     and one more at each write while it lives), RetryAfter the wait
//     until it may be replaced, ResetAfter the wait until it is forgotten.
//   - Denied with Limit 0: there is no shared value (a read, or a
//     proposal of cost 0).
//
// The state ([core.State]) is Last, the instant of the last write;
// Vals[sharedValue], the value; Vals[sharedSeq], its sequence number;
// Vals[2], 0; and Expires, when it is forgotten, Last plus the TTL. The Lua twin treats a value it cannot read (a key of another
// type, a string that is not five doubles, numbers that are not finite
// integers in range) as no value, and overwrites it at the next proposal;
// the Go transition treats a state out of range the same way.
var SharedLimit core.Algorithm = &sharedLimit{}

type sharedLimit struct{}

// The shared limit's numbers in [core.State.Vals]; the third is 0.
const (
	sharedValue = 0
	sharedSeq   = 1
)

var _ algorithms.Scripted = (*sharedLimit)(nil)

//go:embed shared.lua
var sharedLua string

var sharedScript = algorithms.NewScript(sharedLua)

// Name returns "adaptive-limit".
func (*sharedLimit) Name() string { return "adaptive-limit" }

// Validate reports a limit whose rate does not divide its period in µs:
// the interval would not be a whole number of microseconds.
func (*sharedLimit) Validate(l core.Limit) error {
	if l.PeriodMicros()%l.Rate() != 0 {
		return fmt.Errorf("%w: %v: the rate must divide the period in µs (one write per interval, kept for the period)", core.ErrInvalidLimit, l)
	}
	return nil
}

// Horizon returns the limit's period, the shared value's TTL.
func (*sharedLimit) Horizon(l core.Limit) time.Duration { return l.Period() }

// Script returns the Lua twin.
func (*sharedLimit) Script() *algorithms.Script { return sharedScript }

// readable reports whether s is a state the transition wrote: anything
// else is treated as no value, as the Lua twin treats a value it cannot
// read.
func readable(s *core.State) bool {
	return s.Last >= 0 && s.Last <= s.Expires && s.Expires <= core.MaxExact &&
		s.Vals[sharedValue] >= 1 && s.Vals[sharedValue] <= core.MaxUnits &&
		s.Vals[sharedSeq] >= 1 && s.Vals[sharedSeq] <= core.MaxUnits && s.Vals[2] == 0
}

// Transition decides st on s (see [SharedLimit]).
func (*sharedLimit) Transition(s *core.State, st core.Step) core.Decision {
	var t, a, b, e int64
	if readable(s) {
		t, a, b, e = s.Last, s.Vals[sharedValue], s.Vals[sharedSeq], s.Expires
	}
	now := max(st.Now, t) // the value's clock never runs backwards
	live := e > now
	ttl := st.Limit.PeriodMicros()
	interval := ttl / st.Limit.Rate()
	gap := interval - interval/4
	if st.Op == core.OpCharge && st.Cost > 0 && (!live || now-t >= gap) {
		seq := int64(1)
		if live && b < core.MaxUnits {
			seq = b + 1
		}
		s.Last, s.Vals, s.Expires = now, [3]int64{sharedValue: st.Cost, sharedSeq: seq}, now+ttl
		return core.Decision{Allowed: true, Limit: st.Cost, Remaining: seq, ResetAfter: micros(ttl)}
	}
	if live {
		return core.Decision{Limit: a, Remaining: b, RetryAfter: micros(max(t+gap-now, 0)), ResetAfter: micros(e - now)}
	}
	return core.Decision{}
}

func micros(n int64) time.Duration { return time.Duration(n) * time.Microsecond }
