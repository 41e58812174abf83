package algorithms

import (
	"time"

	"github.com/sluicehq/sluice/core"
)

// fixedWindow counts charges in windows of one Period, aligned to the Unix
// epoch, and admits a request while the window's count plus its cost stays
// within Rate. Denied requests are not counted, so a flooding client is
// locked out only until the window ends.
//
// Its known weakness: a client can spend a full window's Rate just before a
// boundary and another just after it, 2×Rate within a moment. Use the
// sliding window algorithms where that matters.
//
// State: Last the last charge (µs); Vals[fwStart] the start of the
// counted window (µs); Vals[fwCount] the count charged in it; Expires the
// window's end.
//
// When the limit changes, the count is kept against the new rate as long as
// the window holding now starts where the counted one did; a new period
// whose window starts elsewhere starts counting afresh, and so does the
// window after Expires. A cost of zero is admitted even when a lowered rate
// leaves the count above it.
//
// A refund takes its cost off the count while the window of the key's
// last charge is still the current one; after that window has ended the
// charge no longer counts, and the refund changes nothing. A charge
// refunded within its own window is therefore undone exactly.
type fixedWindow struct{}

// The fixed window's numbers in [core.State.Vals].
const (
	fwStart = 0
	fwCount = 1
)

func (*fixedWindow) Name() string { return "fixed-window" }

func (*fixedWindow) Validate(core.Limit) error { return nil }

func (*fixedWindow) Horizon(l core.Limit) time.Duration { return l.Period() }

func (*fixedWindow) Transition(s *core.State, st core.Step) core.Decision {
	cost := st.Cost
	rate, period := st.Limit.Rate(), st.Limit.PeriodMicros()
	now := max(st.Now, s.Last)
	start := windowStart(now, period)
	var count int64
	if now < s.Expires && s.Vals[fwStart] == start {
		count = s.Vals[fwCount]
	}
	untilEnd := micros(start + period - now)
	resetAfter := func(count int64) time.Duration {
		if count == 0 {
			return 0
		}
		return untilEnd
	}
	if st.Op == core.OpRefund {
		if cost > 0 && count > 0 {
			count = max(count-cost, 0)
			s.Last, s.Vals[fwStart], s.Vals[fwCount], s.Expires = now, start, count, start+period
		}
		return core.Decision{Allowed: true, Limit: rate, Remaining: max(rate-count, 0), Level: whole(rate - count), ResetAfter: resetAfter(count)}
	}
	if cost > rate {
		return forget(unsatisfiable(rate, max(rate-count, 0), whole(rate-count), resetAfter(count)), now, s.Expires)
	}
	if cost > 0 && count+cost > rate {
		return forget(core.Decision{Limit: rate, Remaining: max(rate-count, 0), Level: whole(rate - count), RetryAfter: untilEnd, ResetAfter: untilEnd}, now, s.Expires)
	}
	count += cost
	d := core.Decision{Allowed: true, Limit: rate, Remaining: max(rate-count, 0), Level: whole(rate - count), ResetAfter: resetAfter(count)}
	switch {
	case cost == 0:
		return forget(d, now, s.Expires)
	case st.Op == core.OpCharge:
		s.Last, s.Vals[fwStart], s.Vals[fwCount], s.Expires = now, start, count, start+period
	}
	return d
}
