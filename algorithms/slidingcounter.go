package algorithms

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core"
)

// slidingWindowCounter approximates a sliding window from two fixed ones:
// it counts charges in the current epoch-aligned window and the previous
// one, and weighs the previous count by the share of the previous window
// that a sliding window ending now still covers. A request of cost n is
// admitted while
//
//	prev × (Period − elapsed)/Period + cur + n ≤ Rate
//
// compared as integers by multiplying through by Period, which is why
// Rate × Period (µs) must stay within [core.MaxUnits]. Denied requests are
// not counted.
//
// State: Last the last charge (µs); Vals[swcStart] the start of the
// current window (µs); Vals[swcCount] its count; Vals[swcPrev] the previous
// window's count; Expires the end of the window after the current one, when
// the count stops weighing.
//
// When the limit changes, counts are kept against the new rate, capped at
// it; a new period whose windows start elsewhere starts counting afresh.
//
// A refund takes its cost off the count of the key's last charge's
// window: the current window's, or, when the last charge was in the
// previous window, that one's, while it still weighs. A charge refunded
// before the key is charged in a later window is therefore undone exactly.
type slidingWindowCounter struct{}

// The sliding window counter's numbers in [core.State.Vals].
const (
	swcStart = 0
	swcCount = 1
	swcPrev  = 2
)

func (*slidingWindowCounter) Name() string { return "sliding-window-counter" }

func (*slidingWindowCounter) Validate(l core.Limit) error {
	if l.Rate() > core.MaxUnits/l.PeriodMicros() {
		return fmt.Errorf("%w: %v: rate × period in µs exceeds 2^52 for the sliding window counter; use a shorter period", core.ErrInvalidLimit, l)
	}
	return nil
}

func (*slidingWindowCounter) Horizon(l core.Limit) time.Duration { return 2 * l.Period() }

func (*slidingWindowCounter) Transition(s *core.State, st core.Step) core.Decision {
	cost := st.Cost
	rate, period := st.Limit.Rate(), st.Limit.PeriodMicros()
	now := max(st.Now, s.Last)
	start := windowStart(now, period)
	var cur, prev int64
	if now < s.Expires {
		switch s.Vals[swcStart] {
		case start:
			cur, prev = s.Vals[swcCount], s.Vals[swcPrev]
		case start - period:
			prev = s.Vals[swcCount]
		}
	}
	// Counts beyond a lowered rate deny alike; capping them keeps the
	// products below within rate × period.
	cur, prev = min(cur, rate), min(prev, rate)
	elapsed := now - start
	left := period - elapsed // of the previous window, still covered
	remaining := func(cur int64) int64 { return max(rate-cur-core.CeilDiv(prev*left, period), 0) }
	// The level is what remaining rounds down, exactly, in periods of a
	// token: within ±rate × period, so within 2^52.
	level := func(cur int64) core.Level { return core.Level{Units: (rate-cur)*period - prev*left, PerToken: period} }
	resetAfter := func(cur int64) time.Duration {
		switch {
		case cur > 0:
			return micros(2*period - elapsed)
		case prev > 0:
			return micros(left)
		}
		return 0
	}
	if st.Op == core.OpRefund {
		switch {
		case cost == 0:
		case cur > 0:
			cur = max(cur-cost, 0)
			s.Last, s.Vals[swcStart], s.Vals[swcCount], s.Vals[swcPrev], s.Expires = now, start, cur, prev, start+2*period
		case prev > 0 && s.Vals[swcStart] == start-period:
			// The last charge was in the previous window, which still
			// weighs until this one ends.
			prev = max(prev-cost, 0)
			s.Last, s.Vals[swcStart], s.Vals[swcCount], s.Vals[swcPrev], s.Expires = now, start, 0, prev, start+period
		}
		return core.Decision{Allowed: true, Limit: rate, Remaining: remaining(cur), Level: level(cur), ResetAfter: resetAfter(cur)}
	}
	if cost > rate {
		return forget(unsatisfiable(rate, remaining(cur), level(cur), resetAfter(cur)), now, s.Expires)
	}
	if room := rate - cur - cost; cost > 0 && (room < 0 || prev*left > room*period) {
		return forget(core.Decision{Limit: rate, Remaining: remaining(cur), Level: level(cur), RetryAfter: micros(retry(elapsed, period, rate, cur, prev, cost)), ResetAfter: resetAfter(cur)}, now, s.Expires)
	}
	cur += cost
	d := core.Decision{Allowed: true, Limit: rate, Remaining: remaining(cur), Level: level(cur), ResetAfter: resetAfter(cur)}
	switch {
	case cost == 0:
		return forget(d, now, s.Expires)
	case st.Op == core.OpCharge:
		s.Last, s.Vals[swcStart], s.Vals[swcCount], s.Vals[swcPrev], s.Expires = now, start, cur, prev, start+2*period
	}
	return d
}

// retry returns the microseconds from now, elapsed into the current
// window, until a denied request of cost passes. Within the current window
// the test prev × (period − e) ≤ room × period holds from e = period −
// ⌊room × period / prev⌋ on; in the next window the current count becomes
// the previous one and the same reasoning applies with room = rate − cost.
// Offsets are taken from the window's start, not added to instants, so
// every intermediate stays within a few periods.
func retry(elapsed, period, rate, cur, prev, cost int64) int64 {
	if room := rate - cur - cost; room >= 0 && prev > 0 {
		if e := period - room*period/prev; e < period {
			return e - elapsed
		}
	}
	var e int64
	if cur > 0 {
		e = max(period-(rate-cost)*period/cur, 0)
	}
	return period + e - elapsed
}
