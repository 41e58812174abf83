package limits

import (
	"math"
	"math/bits"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/core"
)

// rlsUnit is a unit of the rate limit service's configuration and of its
// API's current_limit.
type rlsUnit struct {
	name   string // as the service's enum spells it
	unit   rlsv3.RateLimitResponse_RateLimit_Unit
	period time.Duration
}

// units are the service's units, smallest first, with its lengths of a
// month (30 days) and a year (365 days) (utils.UnitToDivider).
var units = []rlsUnit{
	{"SECOND", rlsv3.RateLimitResponse_RateLimit_SECOND, time.Second},
	{"MINUTE", rlsv3.RateLimitResponse_RateLimit_MINUTE, time.Minute},
	{"HOUR", rlsv3.RateLimitResponse_RateLimit_HOUR, time.Hour},
	{"DAY", rlsv3.RateLimitResponse_RateLimit_DAY, 24 * time.Hour},
	{"WEEK", rlsv3.RateLimitResponse_RateLimit_WEEK, 7 * 24 * time.Hour},
	{"MONTH", rlsv3.RateLimitResponse_RateLimit_MONTH, 30 * 24 * time.Hour},
	{"YEAR", rlsv3.RateLimitResponse_RateLimit_YEAR, 365 * 24 * time.Hour},
}

// wantUnit lists the units for errors.
const wantUnit = "want second, minute, hour, day, week, month or year"

// lookupUnit finds the unit named s as the service does: its enum name,
// upper-cased by strings.ToUpper.
func lookupUnit(s string) (rlsUnit, bool) {
	s = strings.ToUpper(s)
	for _, u := range units {
		if u.name == s {
			return u, true
		}
	}
	return rlsUnit{}, false
}

// unitOf returns the unit and requests per unit that describe l in the
// service's terms (see [Rule.Unit]): the unit equal to l's period, else
// the smallest unit in which l's rate is a whole number of requests, at
// most 2^32−1; else UNKNOWN and 0.
func unitOf(l core.Limit) (rlsv3.RateLimitResponse_RateLimit_Unit, uint32) {
	rate, period := uint64(l.Rate()), uint64(l.PeriodMicros())
	for _, u := range units {
		if uint64(u.period/time.Microsecond) == period && rate <= math.MaxUint32 {
			return u.unit, uint32(rate)
		}
	}
	for _, u := range units {
		// rate × unit ÷ period in 128 bits: a rate of 2^52 a year does
		// not fit 64.
		hi, lo := bits.Mul64(rate, uint64(u.period/time.Microsecond))
		if hi >= period {
			continue // the quotient would not fit 64 bits, let alone 32
		}
		q, rem := bits.Div64(hi, lo, period)
		if rem == 0 && q <= math.MaxUint32 {
			return u.unit, uint32(q)
		}
	}
	return rlsv3.RateLimitResponse_RateLimit_UNKNOWN, 0
}

// UnitPeriod returns the length of one of the service's units (a month
// is 30 days, a year 365, as envoyproxy/ratelimit counts them), or 0 for
// UNKNOWN or a value the enum does not name.
func UnitPeriod(u rlsv3.RateLimitResponse_RateLimit_Unit) time.Duration {
	for _, x := range units {
		if x.unit == u {
			return x.period
		}
	}
	return 0
}

// WindowLimit returns the limit of rate requests per period for an
// algorithm that takes no notice of a burst: a window algorithm, such as
// the rate limit service's fixed window. Its burst is rate, as
// [core.Per] makes it, unless rate times the limit's unit would exceed
// 2^52 ([core.MaxUnits]; 4294967295 a minute, 1000001 a day, 10000019 an
// hour): that bound is the bucket algorithms', whose capacity in units is
// burst × unit; a window counts requests, at most its rate, and never
// computes in units. There the limit keeps burst 1, which a window does
// not read, so it decides the same: 1 × unit is at most the period, and
// a period of at most [core.MaxPeriod] (2^50 µs) leaves it below 2^52.
// So every requests_per_unit of the service (up to 2^32−1) per any of
// its units, and any period up to core.MaxPeriod, is a valid limit.
func WindowLimit(rate int64, period time.Duration) core.Limit {
	l := core.Per(rate, period)
	if l.Validate() != nil {
		if one := l.WithBurst(1); one.Validate() == nil {
			return one
		}
	}
	return l
}
