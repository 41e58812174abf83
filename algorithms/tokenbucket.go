package algorithms

import (
	"math/bits"
	"time"

	"github.com/sluicehq/sluice/core"
)

// tokenBucket keeps a bucket of Burst tokens that refills at Rate per
// Period; a request of cost n takes n tokens or is denied.
//
// The level is kept in units (see [core.Limit.Units]): a token is perToken
// units and perMicro units accrue each microsecond, so refilling is exact
// integer arithmetic, in Go and in Lua alike.
//
// State: T the last charge (µs); A the level in units at T; B the units per
// token the level was written under; E when the bucket will be full again.
//
// When the limit changes before E, the bucket keeps its tokens, capped at
// the new burst; if the change alters the units a token is made of, a
// fraction of a token earned under the old limit is dropped. From E on the
// key is forgotten and starts full under whatever limit it is asked.
type tokenBucket struct{}

func (tokenBucket) Name() string { return "token-bucket" }

func (tokenBucket) Validate(core.Limit) error { return nil }

func (tokenBucket) Horizon(l core.Limit) time.Duration {
	u, r := l.Units()
	return micros(core.CeilDiv(l.Burst()*u, r))
}

func (tokenBucket) Transition(s *core.State, now, cost int64, l core.Limit, peek bool) core.Decision {
	u, r := l.Units()
	burst := l.Burst()
	capacity := burst * u
	level := capacity
	if now = max(now, s.T); now < s.E {
		level = s.A
		if s.B != u && s.B > 0 {
			level = min(s.A/s.B, burst) * u
		}
		level = refill(level, capacity, now-s.T, r)
	}
	untilFull := func(level int64) int64 { return core.CeilDiv(capacity-level, r) }
	if cost > burst {
		return forget(unsatisfiable(burst, level/u, micros(untilFull(level))), now, s.E)
	}
	need := cost * u
	if level < need {
		return forget(core.Decision{
			Limit:      burst,
			Remaining:  level / u,
			RetryAfter: micros(core.CeilDiv(need-level, r)),
			ResetAfter: micros(untilFull(level)),
		}, now, s.E)
	}
	level -= need
	full := untilFull(level)
	d := core.Decision{Allowed: true, Limit: burst, Remaining: level / u, ResetAfter: micros(full)}
	switch {
	case cost == 0:
		return forget(d, now, s.E)
	case !peek:
		s.T, s.A, s.B, s.E = now, level, u, now+full
	}
	return d
}

// refill returns level after elapsed µs at r units a µs, capped at capacity.
// The product may not fit in 64 bits after a long idle spell, so it is
// taken in 128 bits; a Lua twin computes min(capacity, level + elapsed × r),
// whose double rounding cannot matter above 2^53 > capacity.
func refill(level, capacity, elapsed, r int64) int64 {
	deficit := capacity - level
	if deficit <= 0 || elapsed >= deficit { // r ≥ 1
		return capacity
	}
	if hi, lo := bits.Mul64(uint64(elapsed), uint64(r)); hi != 0 || lo >= uint64(deficit) {
		return capacity
	}
	return level + elapsed*r
}
