package policy

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core"
)

// Mode is how a [Breaker] answers a decision the store cannot make: while
// the circuit is open (and the call is not a probe), and for a call that
// failed as the store's failure. Every such answer is a [core.Decision]
// with a nil error, marked with its [core.Source]. A batch (a
// sluice.Stack of several rules) is answered as a whole: every request
// allowed, every request denied, or the batch decided atomically on the
// local store, each request under the share of its own limit.
type Mode uint8

// The modes.
const (
	// FailOpen allows the request: Decision{Allowed: true, Source:
	// core.SourceFailOpen}, with Limit and Remaining 0 (unknown), so
	// middleware sends no rate-limit headers. Nothing is limited while
	// the store is down: choose it where serving too much is cheaper than
	// refusing (the limiter protects a resource with headroom).
	FailOpen Mode = iota
	// FailClosed denies the request: Decision{Allowed: false, Source:
	// core.SourceFailClosed}, with Limit and Remaining 0 and a RetryAfter
	// of the time until the circuit next lets a probe through while it is
	// open (else the per-call deadline). httplimit and grpclimit answer it
	// with 503 and Unavailable, not 429 and ResourceExhausted: nothing
	// was limited. Choose it where an over-grant is worse than an outage
	// (logins, payments, costly calls to a third party).
	FailClosed
	// Degrade decides on the local store of [WithLocal] instead, under
	// the request's limit divided by the number of instances (see
	// [WithInstances]), marked core.SourceDegraded; a denial is a real
	// limit decision, answered 429 by the middleware. When the circuit
	// closes again the store's own state (which kept counting only the
	// calls that reached it) takes over; the local state is kept, so that
	// this instance's own admissions still count in the next outage.
	//
	// The share of a limit of rate r per period p and burst b among n
	// instances is rate ⌊r/n⌋ per p and burst ⌊b/n⌋, so that n instances
	// together never admit more than the limit. Where that rounds to zero
	// the share is one unit: rate 1 per ⌈n/r⌉·p (the fleet's long-run
	// rate stays within r per p, but within one period it may admit up to
	// n, one per instance) and burst 1 (the fleet may admit up to n at
	// once). A share that cannot be expressed exactly (a limit at the edge
	// of sluice's 2^52 bounds) is answered as [FailClosed].
	Degrade
)

var modeNames = [...]string{"fail-open", "fail-closed", "degrade"}

// String returns the mode's name: "fail-open", "fail-closed" or "degrade".
func (m Mode) String() string {
	if m.valid() {
		return modeNames[m]
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

func (m Mode) valid() bool { return int(m) < len(modeNames) }

// share returns each of n instances' share of l (see [Degrade]), and
// whether it can be written at all (its period within core.MaxPeriod).
// It does not validate the share: the local store that decides under it
// does, once.
func share(l core.Limit, n int64) (core.Limit, bool) {
	if n == 1 {
		return l, true
	}
	rate, period, burst := l.Rate(), l.Period(), l.Burst()
	if rate <= 0 {
		return core.Limit{}, false // an invalid limit: validated by the caller
	}
	var s core.Limit
	if rate >= n {
		s = core.Per(rate/n, period)
	} else {
		k := (n + rate - 1) / rate // ⌈n/r⌉ ≥ 2
		if period > core.MaxPeriod/time.Duration(k) {
			return core.Limit{}, false
		}
		s = core.Per(1, period*time.Duration(k))
	}
	return s.WithBurst(max(burst/n, 1)), true
}
