package algorithms

import (
	"fmt"
	"slices"
	"time"

	"github.com/sluicehq/sluice/core"
)

// MaxConcurrency is the most leases the concurrency algorithm holds for
// one key: each is an entry of its state.
const MaxConcurrency = 10_000

// Concurrency limits how many leases a key holds at once, as Stripe's
// concurrent-requests limiter does: at most Rate slots are held, and a
// slot is held until its lease is released or its Period (the lease's
// time to live) passes, so a holder that crashed never keeps a slot.
// Burst is not used. Each request names its lease ([core.Request.Lease]):
//
//   - a charge of cost n acquires n slots under the lease, if n are free,
//     or renews the lease's slots for another Period if the key holds it;
//   - a refund releases every slot of the lease;
//   - lease 0 is anonymous: a charge always acquires new slots, and a
//     refund of cost n releases n anonymous slots, the latest to expire
//     first.
//   - a peek says whether n slots are free.
//
// A denied acquisition's RetryAfter is the time until the first lease
// expires: a release may free a slot sooner. Use sluice.Limiter.Acquire,
// which makes leases, rather than requests of your own.
//
// State: Last the last change (µs); Vals[ccHeld] the slots held; Expires
// when the last lease expires; Log the slots, one entry each, as (expiry µs,
// lease), in no particular order. Expired slots are dropped at every change.
//
// When the limit changes, leases keep their expiries, and are judged
// against the new Rate.
var Concurrency core.Algorithm = &concurrency{}

type concurrency struct{}

// The concurrency algorithm's number in [core.State.Vals].
const ccHeld = 0

func (*concurrency) Name() string { return "concurrency" }

// Leases reports that the algorithm holds leases ([core.Leaser]).
func (*concurrency) Leases() bool { return true }

func (*concurrency) Validate(l core.Limit) error {
	if l.Rate() > MaxConcurrency {
		return fmt.Errorf("%w: %v: the concurrency algorithm holds at most %d leases a key", core.ErrInvalidLimit, l, MaxConcurrency)
	}
	return nil
}

func (*concurrency) Horizon(l core.Limit) time.Duration { return l.Period() }

func (*concurrency) Transition(s *core.State, st core.Step) core.Decision {
	n, ttl, lease := st.Limit.Rate(), st.Limit.PeriodMicros(), st.Lease
	now := max(st.Now, s.Last)
	log := s.Log
	if now >= s.Expires {
		log = log[:0] // every lease has expired
	}
	// live counts the slots still held, mine the request's lease's (none
	// for lease 0, whose slots are anonymous), last the latest expiry.
	var live, mine, last int64
	for _, e := range log {
		if e.At > now {
			live++
			last = max(last, e.At)
			if lease != 0 && e.Cost == lease {
				mine++
			}
		}
	}
	decision := func(allowed bool, held, until int64) core.Decision {
		return core.Decision{Allowed: allowed, Limit: n, Remaining: max(n-held, 0), Level: whole(n - held), ResetAfter: micros(max(until-now, 0))}
	}
	// keep writes the live slots, less the lease's if drop, less release
	// anonymous ones (the latest to expire first), plus add new slots of
	// the lease expiring at at.
	keep := func(drop bool, release, add, at int64) {
		out := log[:0]
		for _, e := range log {
			if e.At > now && !(drop && e.Cost == lease) {
				out = append(out, e)
			}
		}
		for ; release > 0; release-- {
			i := -1
			for j, e := range out {
				if e.Cost == 0 && (i < 0 || e.At > out[i].At) {
					i = j
				}
			}
			if i < 0 {
				break
			}
			out = append(out[:i], out[i+1:]...)
		}
		for range add {
			out = append(out, core.LogEntry{At: at, Cost: lease})
		}
		e := now
		for _, x := range out {
			e = max(e, x.At)
		}
		if len(out) == 0 {
			out = nil
		}
		s.Last, s.Vals[ccHeld], s.Expires, s.Log = now, int64(len(out)), e, out
	}
	switch {
	case st.Op == core.OpRefund && lease != 0:
		if mine > 0 {
			keep(true, 0, 0, 0)
			return decision(true, s.Vals[ccHeld], s.Expires)
		}
		return decision(true, live, last)
	case st.Op == core.OpRefund:
		if live > 0 && st.Cost > 0 {
			keep(false, st.Cost, 0, 0)
			return decision(true, s.Vals[ccHeld], s.Expires)
		}
		return decision(true, live, last)
	case mine > 0 && st.Cost > 0:
		// Renew: the lease's slots expire a Period from now.
		if st.Op == core.OpCharge {
			keep(true, 0, mine, now+ttl)
		}
		return decision(true, live, max(last, now+ttl))
	case st.Cost > n:
		d := decision(false, live, last)
		d.RetryAfter = core.RetryNever
		return d
	case live+st.Cost > n:
		// The request passes once live+cost−n slots have expired.
		exp := make([]int64, 0, live)
		for _, e := range log {
			if e.At > now {
				exp = append(exp, e.At)
			}
		}
		slices.Sort(exp)
		d := decision(false, live, last)
		d.RetryAfter = micros(exp[live+st.Cost-n-1] - now)
		return d
	case st.Cost == 0:
		return decision(true, live, last)
	}
	if st.Op == core.OpCharge {
		keep(false, 0, st.Cost, now+ttl)
	}
	return decision(true, live+st.Cost, max(last, now+ttl))
}
