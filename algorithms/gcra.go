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
// State: Last the last charge (µs); Vals[gcraTAT] the TAT's whole
// microseconds; Vals[gcraTicks] its fraction in ticks (0 ≤ ticks <
// |perMicro|); Vals[gcraPerMicro] the perMicro the fraction was written
// under, negated when the key was in debt at Last (see below); Expires the
// TAT rounded up, when the key is fully rested.
//
// A reservation ([core.Terms.MaxWait]) may move the TAT further ahead of
// now than the tolerance, by at most [core.Step.Debt] ticks (a tick is a
// unit): the key is then in debt, and the time by which the TAT exceeds
// now plus the tolerance is how long a cost of one waits. The decision
// reports what the token bucket's would in the same debt: Remaining 0,
// RetryAfter (after a denial) the time until the same cost would pass at
// once, ResetAfter the time until the TAT, and Delay, for an admitted
// reservation, the time until the TAT less the tolerance, when the
// capacity it took exists. A plain request sees the debt and waits it
// out; a later reservation queues behind it. A refund moves the TAT back
// by the refunded cost's intervals, never before now: it pays off debt
// first, exactly as the token bucket puts its tokens back.
//
// When the limit changes before Expires, the key keeps the time it owed at
// its last charge (its TAT, rounded up to a whole microsecond when the
// fraction's ticks change size). If the key was not in debt then, the time
// owed is capped at the new tolerance: a key is never more than empty. If it
// was (the kept perMicro is negative), the key keeps all of it, up to 2^52
// ticks of the new limit, so that reservations already admitted stay ahead
// of every later request: a lowered burst then leaves the key owing the old
// tolerance's time as well as its debt, which it waits out at the new rate.
// The sign of the kept perMicro is what tells the two apart, since the TAT
// alone cannot tell a reservation's debt from a key a lowered burst left
// over-full. From Expires on the key is forgotten.
type gcra struct{}

// GCRA's numbers in [core.State.Vals].
const (
	gcraTAT      = 0
	gcraTicks    = 1
	gcraPerMicro = 2
)

func (*gcra) Name() string { return "gcra" }

func (*gcra) Validate(core.Limit) error { return nil }

func (*gcra) Horizon(l core.Limit) time.Duration { return TokenBucket.Horizon(l) }

// Reserves reports true: GCRA holds debt as a TAT beyond the tolerance.
func (*gcra) Reserves() bool { return true }

func (*gcra) Transition(s *core.State, st core.Step) core.Decision {
	cost := st.Cost
	u, r := st.Limit.Units()
	burst := st.Limit.Burst()
	tolerance := burst * u
	now := st.Now
	// owed is how far the TAT was ahead of the last charge, in ticks. For
	// a key that was not in debt it is capped at the tolerance, at the
	// last charge rather than at now, so that repeated denials under a
	// new limit agree on their waits; a key in debt keeps it all, up to
	// 2^52 ticks (what a reservation may owe, core.Step.Debt), so that
	// every sum below stays within 2^53.
	var owed int64
	if now = max(now, s.Last); now < s.Expires {
		ahead := s.Vals[gcraTAT] - s.Last
		switch {
		case s.Vals[gcraPerMicro] == r:
			// Written under this rate, within a tolerance of at most
			// 2^52 ticks: the product cannot overflow.
			owed = min(ahead*r+s.Vals[gcraTicks], tolerance)
		case s.Vals[gcraPerMicro] == -r:
			// In debt under this rate: at most 2^52 ticks, likewise.
			owed = ahead*r + s.Vals[gcraTicks]
		default:
			if s.Vals[gcraTicks] > 0 {
				ahead++
			}
			limit := tolerance
			if s.Vals[gcraPerMicro] < 0 {
				limit = core.MaxUnits
			}
			owed = min(min(ahead, core.CeilDiv(limit, r))*r, limit)
		}
	}
	// debt is how far the TAT is ahead of now: what was owed, less what
	// the time since has paid, as a token bucket refills. Beyond the
	// tolerance it is a reservation's debt.
	debt := tolerance - refill(tolerance-owed, tolerance, now-s.Last, r)
	decision := func(allowed bool, debt int64) core.Decision {
		return core.Decision{Allowed: allowed, Limit: burst, Remaining: max(tolerance-debt, 0) / u, Level: core.Level{Units: tolerance - debt, PerToken: u}, ResetAfter: micros(core.CeilDiv(debt, r))}
	}
	save := func(debt int64) {
		c := r
		if debt > tolerance {
			c = -r // in debt: keep it through a change of limit
		}
		s.Last, s.Vals[gcraTAT], s.Vals[gcraTicks], s.Vals[gcraPerMicro], s.Expires = now, now+debt/r, debt%r, c, now+core.CeilDiv(debt, r)
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
		return forget(d, now, s.Expires)
	}
	// A cost of 0 is always admitted, even by a key in debt.
	if over := debt + cost*u - tolerance; cost > 0 && over > st.Debt {
		d := decision(false, debt)
		d.RetryAfter = micros(core.CeilDiv(over, r))
		return forget(d, now, s.Expires)
	}
	debt += cost * u
	d := decision(true, debt)
	switch {
	case cost == 0:
		return forget(d, now, s.Expires)
	case st.Op == core.OpCharge:
		save(debt)
	}
	d.Delay = micros(core.CeilDiv(debt-tolerance, r))
	return d
}
