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
// State: Last the last charge (µs); Vals[tbLevel] the level in units at
// Last; Vals[tbPerToken] the units per token the level was written under;
// Expires when the bucket will be full again.
//
// When the limit changes before Expires, the bucket keeps its tokens, capped
// at the new burst; if the change alters the units a token is made of, a
// fraction of a token earned under the old limit is dropped. From Expires on
// the key is forgotten and starts full under whatever limit it is asked.
//
// A reservation ([core.Terms.MaxWait]) may take the level below zero,
// by at most [core.Step.Debt]: the tokens it took are owed, later
// requests wait until they are repaid, and the reservation's Delay is the
// time until the level is back at zero. A refund puts its tokens back,
// never above the burst: exactly the level the bucket would have had
// without the refunded charge.
type tokenBucket struct{}

// The token bucket's numbers in [core.State.Vals].
const (
	tbLevel    = 0
	tbPerToken = 1
)

func (*tokenBucket) Name() string { return "token-bucket" }

func (*tokenBucket) Validate(core.Limit) error { return nil }

func (*tokenBucket) Horizon(l core.Limit) time.Duration {
	u, r := l.Units()
	return micros(core.CeilDiv(l.Burst()*u, r))
}

func (*tokenBucket) Reserves() bool { return true }

func (*tokenBucket) Transition(s *core.State, st core.Step) core.Decision {
	cost := st.Cost
	u, r := st.Limit.Units()
	burst := st.Limit.Burst()
	capacity := burst * u
	// level is in units, below zero when reservations are owed; a key
	// owes at most 2^52 − capacity (also when the limit changed since it
	// went into debt), so capacity − level stays within 2^52 and every sum
	// here within 2^53.
	floor := capacity - core.MaxUnits
	level := capacity
	now := max(st.Now, s.Last)
	if now < s.Expires {
		level = s.Vals[tbLevel]
		if s.Vals[tbPerToken] != u && s.Vals[tbPerToken] > 0 {
			level = min(max(floorDiv(s.Vals[tbLevel], s.Vals[tbPerToken]), floor/u), burst) * u
		}
		level = refill(max(level, floor), capacity, now-s.Last, r)
	}
	// The decision is built once, at the end, from these: a Decision has
	// too many fields to live in registers, and each copy of one through
	// a helper cost about 5 ns a decision.
	var allowed bool
	var retry, delay int64 // µs
	switch {
	case st.Op == core.OpRefund:
		if cost > 0 && level < capacity {
			if cost >= core.CeilDiv(capacity-level, u) {
				level = capacity // and cost × u might not fit in 64 bits
			} else {
				level += cost * u
			}
			s.Last, s.Vals[tbLevel], s.Vals[tbPerToken], s.Expires = now, level, u, now+core.CeilDiv(capacity-level, r)
		}
		allowed = true
	case cost > burst:
		retry = -1 // never
	case cost*u-level > st.Debt && cost > 0:
		retry = core.CeilDiv(cost*u-level, r)
	case cost == 0:
		allowed = true
	default:
		allowed = true
		level -= cost * u
		delay = core.CeilDiv(-level, r)
		if st.Op == core.OpCharge {
			s.Last, s.Vals[tbLevel], s.Vals[tbPerToken], s.Expires = now, level, u, now+core.CeilDiv(capacity-level, r)
		}
	}
	reset := core.CeilDiv(capacity-level, r)
	if (!allowed || cost == 0) && st.Op != core.OpRefund {
		// Nothing was written: cap the waits at the state's end (forget).
		if left := s.Expires - now; left > 0 {
			reset = min(reset, left)
			if retry > 0 {
				retry = min(retry, left)
			}
		}
	}
	retryAfter := micros(retry)
	if retry < 0 {
		retryAfter = core.RetryNever
	}
	return core.Decision{Allowed: allowed, Limit: burst, Remaining: max(level, 0) / u, Level: core.Level{Units: level, PerToken: u}, RetryAfter: retryAfter, ResetAfter: micros(reset), Delay: micros(delay)}
}

// floorDiv returns ⌊a / b⌋ for b > 0, rounding down for negative a as
// Lua's math.floor does (Go's / rounds towards zero).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
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
