package algorithms

import (
	"time"

	"github.com/sluicehq/sluice/core"
)

// gcra is the generic cell rate algorithm: it keeps one instant, the
// theoretical arrival time (TAT) at which the key will be fully rested, and
// admits a request of cost n if moving the TAT on by n emission intervals
// leaves it no further ahead of now than Burst intervals (the tolerance).
// Under a fixed limit it decides exactly as the token bucket does: how far
// the TAT is ahead of now is the bucket's deficit. The two differ in what
// they keep, and so in what a change of limit does.
//
// An emission interval is perToken/perMicro microseconds (see
// [core.Limit.Units]), seldom a whole number, so the TAT is kept exactly:
// whole microseconds plus a fraction in ticks of 1/perMicro µs. The
// arithmetic works in ticks, where a token is perToken ticks and the
// tolerance Burst × perToken.
//
// State: T the last charge (µs); A the TAT's whole microseconds; B its
// fraction in ticks (0 ≤ B < C); C the perMicro the fraction was written
// under; E the TAT rounded up, when the key is fully rested.
//
// When the limit changes before E, the key keeps the time it owed at its
// last charge (its TAT, rounded up to a whole microsecond when the
// fraction's ticks change size), capped at the new tolerance: a key is
// never more than empty. From E on the key is forgotten.
//
// A refund moves the TAT back by the refunded cost's intervals, never
// before now. GCRA does not reserve ([core.Reserver]): its TAT cannot tell
// a reservation's debt from a key that a lowered burst left over-full, so
// use the token bucket to Wait or Reserve.
type gcra struct{}

func (*gcra) Name() string { return "gcra" }

func (*gcra) Validate(core.Limit) error { return nil }

func (*gcra) Horizon(l core.Limit) time.Duration { return TokenBucket.Horizon(l) }

func (*gcra) Transition(s *core.State, st core.Step) core.Decision {
	cost := st.Cost
	u, r := st.Limit.Units()
	burst := st.Limit.Burst()
	tolerance := burst * u
	now := st.Now
	// owed is how far the TAT was ahead of the last charge, in ticks,
	// capped at the tolerance: the cap is taken at the last charge, not at
	// now, so that repeated denials under a new limit agree on their waits.
	var owed int64
	if now = max(now, s.T); now < s.E {
		if ahead := s.A - s.T; s.C == r {
			// Written under this rate, within a tolerance of at most
			// 2^52 ticks: the product cannot overflow.
			owed = min(ahead*r+s.B, tolerance)
		} else {
			if s.B > 0 {
				ahead++
			}
			owed = min(min(ahead, core.CeilDiv(tolerance, r))*r, tolerance)
		}
	}
	// debt is how far the TAT is ahead of now: what was owed, less what
	// the time since has paid, as a token bucket refills.
	debt := tolerance - refill(tolerance-owed, tolerance, now-s.T, r)
	decision := func(allowed bool, debt int64) core.Decision {
		return core.Decision{Allowed: allowed, Limit: burst, Remaining: (tolerance - debt) / u, ResetAfter: micros(core.CeilDiv(debt, r))}
	}
	save := func(debt int64) {
		s.T, s.A, s.B, s.C, s.E = now, now+debt/r, debt%r, r, now+core.CeilDiv(debt, r)
	}
	if st.Op == core.OpRefund {
		if cost > 0 && debt > 0 {
			if cost >= core.CeilDiv(debt, u) {
				debt = 0 // and cost × u might not fit in 64 bits
			} else {
				debt -= cost * u
			}
			save(debt)
		}
		return decision(true, debt)
	}
	if cost > burst {
		d := decision(false, debt)
		d.RetryAfter = core.RetryNever
		return forget(d, now, s.E)
	}
	if over := debt + cost*u - tolerance; over > 0 {
		d := decision(false, debt)
		d.RetryAfter = micros(core.CeilDiv(over, r))
		return forget(d, now, s.E)
	}
	debt += cost * u
	switch {
	case cost == 0:
		return forget(decision(true, debt), now, s.E)
	case st.Op == core.OpCharge:
		save(debt)
	}
	return decision(true, debt)
}
