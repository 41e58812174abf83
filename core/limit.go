package core

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// MaxExact is 2^53, the bound below which every integer is exact in an
// IEEE double. Lua numbers in Redis are doubles, and each algorithm's Lua
// twin must compute exactly what its Go transition computes, so every
// quantity an algorithm computes stays below it.
const MaxExact = 1 << 53

// MaxUnits is 2^52, the bound on the quantities a request brings and an
// algorithm keeps: a rate, a cost, a bucket's capacity in units (burst ×
// perToken, see [Limit.Units]), a window's rate × period in µs, an instant
// in µs since the Unix epoch (until the year 2112). Half of [MaxExact], it
// leaves room to add two of them without leaving exact arithmetic.
// [Limit.Validate], each algorithm's Validate and [Request.Validate]
// reject what would exceed it.
const MaxUnits = MaxExact / 2

// MaxPeriod is the longest period a limit may have, 2^50 µs (about 35
// years): an instant plus two periods stays below [MaxExact].
const MaxPeriod = time.Duration(1<<50) * time.Microsecond

// Limit is a rate, Rate events per Period, with a Burst: the largest cost
// admitted at once. Build one with [PerSecond], [PerMinute], [PerHour],
// [PerDay], [Per] or [Every], and change its burst with [Limit.WithBurst].
//
// The zero Limit is invalid: [Limit.Validate] reports it, and nothing in
// sluice decides with it. [Inf] is the limit that admits everything.
//
// Limits are comparable values; a Limit is safe to share between goroutines.
// Internally a Limit keeps its rate in exact integer form (see
// [Limit.Units]) so that every store reaches the same decision.
type Limit struct {
	unit   int64 // units per token: period / gcd(period, rate)
	refill int64 // units per microsecond: rate / gcd(period, rate)
	burst  int64
	form   int64 // gcd(period, rate), and the flags below
}

// A Limit is four words, so that a request carrying one stays small: its
// rate and period are its units times the gcd kept in form's low bits, and
// form's high bits say whether it is valid (the sign bit, tested on every
// request), [Inf], or a period that is not a whole number of microseconds.
// A limit whose rate or period is unusable keeps them as given, with a gcd
// of 1, so that Validate and String can say what is wrong.
const (
	formValid    = math.MinInt64 // check passed when the limit was built
	formInf      = 1 << 61
	formFraction = 1 << 60 // the period is not a whole number of µs
	formGCD      = 1<<60 - 1
)

// Inf is the limit that admits every request and keeps no state.
var Inf = Limit{form: formInf}

// PerSecond returns a limit of n events per second with a burst of n.
func PerSecond(n int64) Limit { return Per(n, time.Second) }

// PerMinute returns a limit of n events per minute with a burst of n.
func PerMinute(n int64) Limit { return Per(n, time.Minute) }

// PerHour returns a limit of n events per hour with a burst of n.
func PerHour(n int64) Limit { return Per(n, time.Hour) }

// PerDay returns a limit of n events per 24 hours with a burst of n.
func PerDay(n int64) Limit { return Per(n, 24*time.Hour) }

// Every returns a limit of one event every d with a burst of 1.
// Every(0) is invalid, not infinite: use [Inf] for that.
func Every(d time.Duration) Limit { return Per(1, d) }

// Per returns a limit of n events per period with a burst of n. The period
// is kept in whole microseconds; a period that is not a positive whole
// number of microseconds makes the limit invalid.
func Per(n int64, period time.Duration) Limit {
	micros := int64(period / time.Microsecond)
	if period <= 0 || period%time.Microsecond != 0 || n <= 0 {
		// Keep what the caller gave so Validate and String can say what
		// is wrong with it.
		l := Limit{unit: micros, refill: n, burst: n, form: 1}
		switch {
		case period > 0 && micros == 0:
			l.unit = -1 // sub-microsecond
		case period > 0 && period%time.Microsecond != 0:
			l.form |= formFraction
		}
		return l
	}
	g := gcd(micros, n)
	l := Limit{unit: micros / g, refill: n / g, burst: n, form: g}
	return l.checked()
}

// checked returns l marked valid if it passes check, else unmarked.
func (l Limit) checked() Limit {
	l.form &^= formValid
	if l.check() == nil {
		l.form |= formValid
	}
	return l
}

// WithBurst returns a copy of l whose burst is b. The token bucket and GCRA
// admit at most b at once; the window algorithms count Rate per window and
// take no notice of the burst. [Inf] has no burst: Inf.WithBurst(b) is Inf.
func (l Limit) WithBurst(b int64) Limit {
	if l.IsInf() {
		return l
	}
	l.burst = b
	return l.checked()
}

// Rate returns the number of events l admits per [Limit.Period].
func (l Limit) Rate() int64 { return l.refill * l.gcd() }

// Period returns the period over which [Limit.Rate] events are admitted.
func (l Limit) Period() time.Duration { return time.Duration(l.PeriodMicros()) * time.Microsecond }

// PeriodMicros returns the period in whole microseconds.
func (l Limit) PeriodMicros() int64 { return l.unit * l.gcd() }

// gcd returns gcd(period, rate) of a limit built from a usable rate and
// period, 1 for one built from others, and 0 for the zero Limit and [Inf].
func (l Limit) gcd() int64 { return l.form & formGCD }

// Burst returns the largest cost the bucket algorithms admit at once.
func (l Limit) Burst() int64 { return l.burst }

// IsInf reports whether l is [Inf].
func (l Limit) IsInf() bool { return l.form&formInf != 0 }

// valid reports whether l passed [Limit.check] when it was built.
func (l Limit) valid() bool { return l.form < 0 }

// Units returns the rate in exact integer form: a token is perToken units
// and perMicro units accrue each microsecond, so perMicro/perToken tokens
// per microsecond is exactly Rate/Period. The pair is Rate and Period in
// microseconds divided by their greatest common divisor, which keeps the
// arithmetic small: 1,000,000 per day is 86,400 units a token, 1 a
// microsecond.
func (l Limit) Units() (perToken, perMicro int64) { return l.unit, l.refill }

// Validate reports whether l can be used to decide, with an error wrapping
// [ErrInvalidLimit] that says what is wrong. Algorithms may reject further
// limits whose arithmetic would not be exact (see [MaxExact]).
func (l Limit) Validate() error {
	if l.valid() || l.IsInf() {
		return nil // checked when built: Validate runs on every request
	}
	return l.check()
}

func (l Limit) check() error {
	if p := l.problem(); p != "" {
		return fmt.Errorf("%w: %s", ErrInvalidLimit, p)
	}
	return nil
}

// problem says what is wrong with l, or returns "" if nothing is. check
// and [ParseLimit] wrap it in [ErrInvalidLimit], each with its own context.
func (l Limit) problem() string {
	rate, period := l.Rate(), l.PeriodMicros()
	switch {
	case rate <= 0:
		return fmt.Sprintf("rate %d must be at least 1", rate)
	case rate > MaxUnits:
		return fmt.Sprintf("rate %d exceeds 2^52", rate)
	case period == -1:
		return "period must be at least 1µs"
	case period <= 0:
		return "period must be positive"
	case period > int64(MaxPeriod/time.Microsecond):
		return fmt.Sprintf("period %v is longer than %v", l.Period(), MaxPeriod)
	case l.form&formFraction != 0:
		return "period must be a whole number of microseconds"
	case l.burst <= 0:
		return fmt.Sprintf("burst %d must be at least 1", l.burst)
	case l.burst > MaxUnits/l.unit:
		return fmt.Sprintf("%v: burst × unit exceeds 2^52; lower the burst or use a rate that divides the period", l)
	}
	return ""
}

// String formats l as "10 req/s (burst 50)". Periods of a second, minute,
// hour and day print as s, min, h and day; others as a duration
// ("1 req/250ms (burst 1)"). It is for people to read; [Limit.MarshalText]
// gives the form [ParseLimit] reads back ("10/s burst 50").
func (l Limit) String() string {
	if l.IsInf() {
		return "unlimited"
	}
	var per string
	switch l.PeriodMicros() {
	case 1e6:
		per = "s"
	case 60e6:
		per = "min"
	case 3600e6:
		per = "h"
	case 86400e6:
		per = "day"
	default:
		per = l.Period().String()
	}
	return strconv.FormatInt(l.Rate(), 10) + " req/" + per + " (burst " + strconv.FormatInt(l.burst, 10) + ")"
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// CeilDiv returns ⌈a/b⌉ for a ≥ 0 and b > 0. The algorithms round every
// wait up with it, so that a retry at exactly the reported instant passes.
func CeilDiv(a, b int64) int64 {
	switch {
	case a <= 0:
		return 0
	case b == 1: // every rate that divides its period; and division is slow
		return a
	}
	return (a-1)/b + 1
}

// RetryNever is the [Decision.RetryAfter] of a request that can never be
// admitted under its limit: its cost is larger than the limit's capacity.
// Retrying such a request is pointless; [Decision.Unsatisfiable] reports it.
const RetryNever = time.Duration(math.MaxInt64)
