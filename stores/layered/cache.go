package layered

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core"
)

// entry is what the cache keeps for one key under one algorithm: the
// latest denial the remote gave it, and its allotment.
type entry struct {
	// deny is read without a lock on every request for the key, and
	// replaced whole by the remote's next denial.
	deny atomic.Pointer[denial]

	mu        sync.Mutex
	allotment *allotment // nil until the key is allotted
	dead      bool       // dropped by Reset: holders of the entry must not spend from it
}

// drop forgets the entry's denial and allotment, for Reset.
func (e *entry) drop() {
	e.deny.Store(nil)
	e.mu.Lock()
	e.dead, e.allotment = true, nil
	e.mu.Unlock()
}

// denial is a denial the remote gave a request of cost under limit. It is
// never changed once stored.
type denial struct {
	limit core.Limit
	cost  int64
	d     core.Decision // the remote's decision
	// explicit marks a denial decided at an explicit instant, at (µs
	// since the Unix epoch); it answers only requests at that instant.
	// Otherwise at is the local clock when the call was sent (ns), retryAt
	// when the request would pass and until when the cache stops serving
	// the denial (retryAt, or sooner under Config.MaxDeny).
	explicit           bool
	at, retryAt, until int64
}

// repeats reports whether d, the remote's denial of req, is the one dn
// holds: the same answer to the same request, as the denials of one
// round of calls on a hot key are (decided at one instant of the server's
// clock, none of them charging). Either serves alike, so the cache keeps
// dn and allocates nothing; a denial timed from another caller's start
// is as sound as this one's, as each was sent before the remote decided.
func (dn *denial) repeats(req *core.Request, d *core.Decision) bool {
	if dn.limit != req.Limit || dn.cost != req.Cost || dn.d != *d {
		return false
	}
	if req.Now.IsZero() {
		return !dn.explicit
	}
	return dn.explicit && dn.at == req.Now.UnixMicro()
}

// cachedDenial answers req from the entry's denial if it can; now is the
// local clock, for requests without an explicit Now.
//
// On the local clock, a denial of cost c with wait r, sent at t, answers
// requests under the same limit of cost c up to the limit's capacity
// until t + r. Every algorithm admits a request only once what the key
// holds (tokens, or room in its windows) covers the cost, and what a key
// holds only grows with time when nothing is charged, and shrinks when
// something is: so a request of cost c' ≥ c is denied at every instant
// before t + r, whatever the rest of the fleet does, short of a Reset or
// a change of limit. Smaller costs, costs above the capacity (which the
// remote calls unsatisfiable) and costs of zero go to the remote.
//
// At an explicit instant, the cache answers only a request at the same
// instant, of the same cost and limit, with the remote's own numbers: it
// cannot know how a caller's instants will move (replays run faster than
// time, traces backwards), and at the same instant its answer is exactly
// the remote's.
func (e *entry) cachedDenial(req *core.Request, now int64) (core.Decision, bool) {
	dn := e.deny.Load()
	if dn == nil || dn.limit != req.Limit {
		return core.Decision{}, false
	}
	d := dn.d
	d.Source = core.SourceCache
	if !req.Now.IsZero() {
		if !dn.explicit || dn.at != req.Now.UnixMicro() || dn.cost != req.Cost {
			return core.Decision{}, false
		}
		return d, true
	}
	if dn.explicit || req.Cost < dn.cost || req.Cost > d.Limit || now >= dn.until {
		return core.Decision{}, false
	}
	// A clock that stepped back since the denial was cached decides at
	// the denial, as the remote decides at a key's last charge.
	now = max(now, dn.at)
	d.RetryAfter = ceilMicros(dn.retryAt - now)
	d.ResetAfter = max(d.ResetAfter-time.Duration(now-dn.at), d.RetryAfter)
	d.At = later(d.At, now-dn.at)
	d.Level = core.Level{} // the key's level has moved since: unknown
	return d, true
}

// later returns the instant at, a remote decision's, moved on by the
// local clock's elapsed ns, rounded down to a whole microsecond (waits
// are rounded up, so that an instant plus a wait is never earlier than
// the remote's); the zero Time stays zero.
func later(at time.Time, elapsed int64) time.Time {
	if at.IsZero() {
		return at
	}
	return at.Add(time.Duration(elapsed).Truncate(time.Microsecond))
}

// ceilMicros returns ns as a duration rounded up to a whole microsecond,
// the unit of every wait a store reports: a retry at that instant is no
// earlier than the remote's.
func ceilMicros(ns int64) time.Duration {
	return time.Duration((ns + 999) / 1000 * 1000)
}
