package algorithms

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core"
)

// MaxLogRate is the largest rate the sliding window log accepts. The log
// keeps an entry for every instant a charge was admitted within the last
// period, so its memory grows with the rate; above this, use the sliding
// window counter.
const MaxLogRate = 10_000

// maxIdleLog is the most entries' room a log keeps once all its entries
// have left the window.
const maxIdleLog = 16

// slidingWindowLog keeps every admitted charge of the last Period and
// admits a request of cost n while the charges in (now − Period, now] plus n
// stay within Rate. It is exact, never admitting more than Rate in any
// window of one Period, at the price of memory proportional to the rate.
// Denied requests are not logged.
//
// State: Last the last charge (µs); Vals[logCost] the total cost of
// Log[Vals[logFirst]:]; Vals[logFirst] the index of the first entry not yet
// dropped; Expires when the newest entry leaves the window; Log the charges
// in time order, one entry per instant. Entries that fall out of the window
// are dropped when the next charge is admitted, and the slice is compacted
// once half of it is dead, so each charge costs amortized constant time; a
// log whose entries have all left gives up a large array.
//
// When the limit changes, the logged charges are judged against the new rate
// and period until Expires; from Expires on the key is forgotten.
//
// A refund takes its cost off the newest entries still in the window,
// newest first, so a refund of the key's last charge undoes it exactly.
type slidingWindowLog struct{}

// The sliding window log's numbers in [core.State.Vals].
const (
	logCost  = 0
	logFirst = 1
)

func (*slidingWindowLog) Name() string { return "sliding-window-log" }

func (*slidingWindowLog) Validate(l core.Limit) error {
	if l.Rate() > MaxLogRate {
		return fmt.Errorf("%w: %v: the sliding window log keeps at most %d entries; use the sliding window counter", core.ErrInvalidLimit, l, MaxLogRate)
	}
	return nil
}

func (*slidingWindowLog) Horizon(l core.Limit) time.Duration { return l.Period() }

func (*slidingWindowLog) Transition(s *core.State, st core.Step) core.Decision {
	cost := st.Cost
	rate, period := st.Limit.Rate(), st.Limit.PeriodMicros()
	first, live := s.Vals[logFirst], s.Vals[logCost]
	now := max(st.Now, s.Last)
	if now >= s.Expires {
		first, live = int64(len(s.Log)), 0 // forgotten
	}
	// Skip the entries that have left the window (now − period, now].
	for first < int64(len(s.Log)) && s.Log[first].At <= now-period {
		live -= s.Log[first].Cost
		first++
	}
	resetAfter := func(live int64) time.Duration {
		if live == 0 {
			return 0
		}
		return micros(s.Log[len(s.Log)-1].At + period - now)
	}
	if st.Op == core.OpRefund {
		if cost > 0 && live > 0 {
			n := int64(len(s.Log))
			for give := cost; give > 0 && n > first; {
				e := &s.Log[n-1]
				take := min(e.Cost, give)
				e.Cost -= take
				give -= take
				live -= take
				if e.Cost > 0 {
					break
				}
				n--
			}
			s.Log = s.Log[:n]
			s.Last, s.Vals[logCost], s.Vals[logFirst], s.Expires = now, live, first, now
			if live > 0 {
				s.Expires = s.Log[n-1].At + period
			}
		}
		return core.Decision{Allowed: true, Limit: rate, Remaining: max(rate-live, 0), Level: whole(rate - live), ResetAfter: resetAfter(live)}
	}
	if cost > rate {
		return forget(unsatisfiable(rate, max(rate-live, 0), whole(rate-live), resetAfter(live)), now, s.Expires)
	}
	if cost > 0 && live+cost > rate {
		// The request passes once enough of the oldest charges leave.
		freed, i := int64(0), first
		for ; live-freed+cost > rate && i < int64(len(s.Log)); i++ {
			freed += s.Log[i].Cost
		}
		return forget(core.Decision{
			Limit:      rate,
			Remaining:  max(rate-live, 0),
			Level:      whole(rate - live),
			RetryAfter: micros(s.Log[i-1].At + period - now),
			ResetAfter: resetAfter(live),
		}, now, s.Expires)
	}
	if cost == 0 {
		return forget(core.Decision{Allowed: true, Limit: rate, Remaining: max(rate-live, 0), Level: whole(rate - live), ResetAfter: resetAfter(live)}, now, s.Expires)
	}
	if st.Op == core.OpPeek {
		// The charge would be the newest entry, leaving a period from now.
		return core.Decision{Allowed: true, Limit: rate, Remaining: rate - live - cost, Level: whole(rate - live - cost), ResetAfter: micros(period)}
	}
	log := s.Log
	switch {
	case first == int64(len(log)) && cap(log) > maxIdleLog:
		log, first = nil, 0 // let a burst's array go
	case first == int64(len(log)):
		log, first = log[:0], 0
	case first > int64(len(log))/2:
		log = log[:copy(log, log[first:])]
		first = 0
	}
	if n := len(log); n > int(first) && log[n-1].At == now {
		log[n-1].Cost += cost
	} else {
		log = append(log, core.LogEntry{At: now, Cost: cost})
	}
	live += cost
	s.Last, s.Vals[logCost], s.Vals[logFirst], s.Expires, s.Log = now, live, first, now+period, log
	return core.Decision{Allowed: true, Limit: rate, Remaining: rate - live, Level: whole(rate - live), ResetAfter: resetAfter(live)}
}
