package policy

import (
	"sync"
	"sync/atomic"
	"time"
)

// The trip rule's ratio ([WithTrip]) and timingOut weigh the outcomes of
// the last window: how many calls failed, and how many succeeded. The
// window is on the process clock, as the run is (run.go), and as every
// span the trip rule weighs must be (clock.go).
//
// On the wall clock it was not. gobreaker rolls its window on the wall
// clock, and on a busy host the process clock runs slower: a window of
// the wall clock holds less of the process's time. Beside CPU burners,
// the process ran at a fifth of the wall clock's pace, and a stall of two
// deadlines on its clock took 952 ms of the wall's: nearly all of a
// one-second window. The stall's 461 failures then outweighed the few
// successes left in that window, and the ratio opened the circuit on a
// healthy store. On the process clock the same stall is a fifth of the
// window, and the successes around it keep the ratio low.
//
// So the breaker counts the window's outcomes itself, in an outcomeTally,
// and reads none of gobreaker's counts: gobreaker keeps the circuit's
// state, its probes and its open timeout. The run (failureRun) keeps its
// own tenths: a success ends a run and forgets its failures, which the
// window, whose buckets every call shares without a lock, keeps.

// outcomeTally counts a circuit's outcomes by tenth of the window on the
// process clock. Its buckets are tagged with their generation and age, so
// that a generation's counts start from zero and a bucket is reused once
// the window has passed it.
type outcomeTally struct {
	period  int64 // ns of the process clock: a tenth of the window
	buckets []bucket
	mu      sync.Mutex // held to reuse a bucket
}

type bucket struct {
	tag atomic.Uint64 // generation<<32 | age+1; 0 for none
	n   [outcomeKinds]atomic.Uint64
}

// outcomeKind is what a tally counts: a success, a failure, or a call
// excluded from the trip rule (see [Counts]).
type outcomeKind uint8

const (
	kindSuccess outcomeKind = iota
	kindFailure
	kindExcluded
	outcomeKinds
)

// newOutcomeTally returns a tally of a window in tenths.
func newOutcomeTally(window time.Duration) *outcomeTally {
	const tenths = 10
	return &outcomeTally{period: max(int64(window/tenths), 1), buckets: make([]bucket, tenths)}
}

// age returns the bucket age, in generation g, of the process instant at.
func (t *outcomeTally) age(g *generation, at int64) uint64 {
	return uint64(max(at-g.start, 0) / t.period)
}

func tag(g *generation, age uint64) uint64 { return g.id<<32 | (age+1)&(1<<32-1) }

// add counts an outcome of kind k in generation g at the process instant
// at.
func (t *outcomeTally) add(g *generation, at int64, k outcomeKind) {
	age := t.age(g, at)
	b := &t.buckets[age%uint64(len(t.buckets))]
	want := tag(g, age)
	if b.tag.Load() != want {
		t.mu.Lock()
		switch cur := b.tag.Load(); {
		case cur > want: // a later bucket: this outcome is older than the window
			t.mu.Unlock()
			return
		case cur < want:
			for i := range b.n {
				b.n[i].Store(0)
			}
			b.tag.Store(want)
		}
		t.mu.Unlock()
	}
	b.n[k].Add(1)
}

// sum returns the outcomes counted in generation g within the window
// that ends at the process instant now, by kind.
func (t *outcomeTally) sum(g *generation, now int64) [outcomeKinds]uint32 {
	age := t.age(g, now)
	oldest := tag(g, max(age+1, uint64(len(t.buckets)))-uint64(len(t.buckets)))
	var n [outcomeKinds]uint64
	for i := range t.buckets {
		b := &t.buckets[i]
		if c := b.tag.Load(); c >= oldest && c <= tag(g, age) {
			for k := range n {
				n[k] += b.n[k].Load()
			}
		}
	}
	var out [outcomeKinds]uint32
	for k := range n {
		out[k] = uint32(min(n[k], 1<<32-1))
	}
	return out
}
