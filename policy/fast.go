package policy

import (
	"sync"
	"sync/atomic"
	"time"
)

// The fast path: a closed circuit, nothing failing.
//
// gobreaker takes its lock and reads the clock twice for every call, to
// count it. While the circuit is closed and the last outcome it counted
// was a success, another success changes nothing it decides by: its
// consecutive failures stay at zero, and the state stays closed. Only the
// window's total of successes matters, to the trip rule's ratio
// ([WithTrip]) and to timingOut. So such a call is not reported to
// gobreaker: it is counted in a tally of the breaker's own, in buckets of
// the same period as gobreaker's, which the trip rule adds to gobreaker's
// counts. Anything else, a failure, an excluded call, or a success
// during which gobreaker counted a failure (whose run of consecutive
// failures the success ends), is reported to gobreaker as before, and
// the calls after a failure take gobreaker's path until it counts a
// success again. A call on the fast path also takes no place
// in the slow start (it runs only once the slow start is over).
//
// What differs from reporting every call to gobreaker: a call that fails
// on the fast path is counted in the bucket where it ended, not where it
// began (at most a deadline later), and a success racing a failure's
// report may miss the ratio that failure is judged by, by one.

// generation is one of gobreaker's generations: a state of the circuit,
// whose counts start from zero.
type generation struct {
	id    uint64
	start int64 // ns after the breaker's base, within the time to record it
}

// successTally counts, by bucket of gobreaker's period, the successes of
// the fast path, which gobreaker does not see. Its buckets are tagged with
// their generation and age, so that a generation's counts start from zero
// and a bucket is reused once the window has passed it.
type successTally struct {
	period  int64 // ns: gobreaker's bucket period
	buckets []bucket
	mu      sync.Mutex // held to reuse a bucket
}

type bucket struct {
	tag atomic.Uint64 // generation<<32 | age+1; 0 for none
	n   atomic.Uint64
}

// newSuccessTally returns a tally of buckets as gobreaker makes them for
// a window in buckets of period.
func newSuccessTally(window, period time.Duration) *successTally {
	n := int64(1)
	if period > 0 {
		n = int64((window + period - 1) / period)
	} else {
		period = window
	}
	return &successTally{period: int64(period), buckets: make([]bucket, n)}
}

// age returns the bucket age, in generation g, of the instant now (ns
// after the breaker's base).
func (t *successTally) age(g *generation, now int64) uint64 {
	return uint64(max(now-g.start, 0) / t.period)
}

func tag(g *generation, age uint64) uint64 { return g.id<<32 | (age+1)&(1<<32-1) }

// add counts a success of generation g begun at now.
func (t *successTally) add(g *generation, now int64) {
	age := t.age(g, now)
	b := &t.buckets[age%uint64(len(t.buckets))]
	want := tag(g, age)
	if b.tag.Load() != want {
		t.mu.Lock()
		switch cur := b.tag.Load(); {
		case cur > want: // a later bucket: this call is older than the window
			t.mu.Unlock()
			return
		case cur < want:
			b.n.Store(0)
			b.tag.Store(want)
		}
		t.mu.Unlock()
	}
	b.n.Add(1)
}

// sum returns the successes counted in generation g within the window
// that ends at now, as gobreaker counts its own.
func (t *successTally) sum(g *generation, now int64) uint32 {
	age := t.age(g, now)
	oldest := tag(g, max(age+1, uint64(len(t.buckets)))-uint64(len(t.buckets)))
	var n uint64
	for i := range t.buckets {
		b := &t.buckets[i]
		if c := b.tag.Load(); c >= oldest && c <= tag(g, age) {
			n += b.n.Load()
		}
	}
	return uint32(min(n, 1<<32-1))
}
