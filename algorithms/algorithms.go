package algorithms

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core"
)

// The algorithms. Each is a pointer to a value of an unexported, empty
// type, safe to share; the package documentation compares them.
//
// Their methods take pointer receivers: called through core.Algorithm, a
// value method is reached through a wrapper the compiler generates, which
// copies the Step and the Decision once more, and a token bucket's
// Transition called so took about 28 ns instead of 20.
var (
	// TokenBucket keeps Burst tokens, refilled at Rate per Period.
	TokenBucket core.Algorithm = &tokenBucket{}
	// GCRA decides as the token bucket does, keeping one instant.
	GCRA core.Algorithm = &gcra{}
	// FixedWindow counts Rate per epoch-aligned window of one Period.
	FixedWindow core.Algorithm = &fixedWindow{}
	// SlidingWindowCounter weighs the previous window's count into the
	// current one's.
	SlidingWindowCounter core.Algorithm = &slidingWindowCounter{}
	// SlidingWindowLog logs every charge of the last Period.
	SlidingWindowLog core.Algorithm = &slidingWindowLog{}
)

var all = []core.Algorithm{TokenBucket, GCRA, FixedWindow, SlidingWindowCounter, SlidingWindowLog}

// All returns sluice's rate-limiting algorithms, in the order of this
// package's documentation. [Concurrency], which limits leases held rather
// than a rate, is not among them.
func All() []core.Algorithm { return append([]core.Algorithm(nil), all...) }

// ByName returns the algorithm whose [core.Algorithm.Name] is name, such as
// "token-bucket", "gcra" or "concurrency".
func ByName(name string) (core.Algorithm, error) {
	for _, a := range append(all[:len(all):len(all)], Concurrency) {
		if a.Name() == name {
			return a, nil
		}
	}
	return nil, fmt.Errorf("algorithms: unknown algorithm %q (want one of token-bucket, gcra, fixed-window, sliding-window-counter, sliding-window-log, concurrency)", name)
}

// micros converts a count of microseconds to a duration.
func micros(n int64) time.Duration { return time.Duration(n) * time.Microsecond }

// windowStart returns the start of the period-long window holding now.
// Windows are aligned to the Unix epoch, so every key's windows begin at the
// same instants and a Lua twin computes the same boundaries.
func windowStart(now, period int64) int64 { return now - now%period }

// unsatisfiable is the decision for a cost above capacity.
func unsatisfiable(limit, remaining int64, level core.Level, resetAfter time.Duration) core.Decision {
	return core.Decision{Limit: limit, Remaining: remaining, Level: level, RetryAfter: core.RetryNever, ResetAfter: resetAfter}
}

// whole returns the level of a window algorithm that counts whole costs:
// n left, in tokens of one unit.
func whole(n int64) core.Level { return core.Level{Units: n, PerToken: 1} }

// forget caps the waits of a decision that writes nothing at e, the instant
// the key's state is forgotten: from e on the key is fresh, at full
// capacity, and admits any satisfiable cost. Under the limit the state was
// written with the waits never reach e; under another they may.
func forget(d core.Decision, now, e int64) core.Decision {
	if left := micros(e - now); left > 0 {
		if d.RetryAfter != core.RetryNever {
			d.RetryAfter = min(d.RetryAfter, left)
		}
		d.ResetAfter = min(d.ResetAfter, left)
	}
	return d
}

// MaxAllotment returns the most of the token bucket's capacity under l
// that package layered may take at once (its Allotter): the burst.
func (*tokenBucket) MaxAllotment(l core.Limit) int64 { return l.Burst() }

// MaxAllotment returns GCRA's largest allotment under l: its burst.
func (*gcra) MaxAllotment(l core.Limit) int64 { return l.Burst() }

// MaxAllotment returns the fixed window's largest allotment under l: its
// rate, what one window admits.
func (*fixedWindow) MaxAllotment(l core.Limit) int64 { return l.Rate() }

// Windowed reports false: the token bucket refills continuously.
func (*tokenBucket) Windowed() bool { return false }

// Windowed reports false: GCRA's capacity comes back continuously.
func (*gcra) Windowed() bool { return false }

// Windowed reports true: the fixed window's capacity comes back at each
// window's start.
func (*fixedWindow) Windowed() bool { return true }
