package policy

import (
	"context"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// deadlines gives the breaker's calls their deadlines: on the process
// clock (see meter), as long as the store's recent latency asks for, and
// without a timer for each call.
//
// The per-call deadline adapts to the latency the store shows while it
// answers: three times the 99.9th percentile of the time answered calls
// took (a sample of them, at a high rate: see minTimed), recently, kept
// between the floor ([WithTimeout]) and the ceiling ([WithMaxTimeout]).
// A host that gets busy slows every reply a little, its own process's
// and Redis's alike, and the deadline follows; a store that stops
// answering adds no answered calls, so the deadline stays where healthy
// replies put it, and the trip rule, which counts in deadlines, opens
// the circuit as soon as ever.
//
// The deadline runs on the process clock, and the latencies it adapts to
// are taken on the wall clock less the freezes: the stalls the meter saw
// across which the process used almost no CPU time (see meter). A freeze
// (a stop, a CPU quota spent) stops every thread, so no reply could be
// read in it, and a latency that counted it would raise the deadline to
// the freeze's length. A stall of one thread is kept: on a busy host the
// thread that reads a connection can wait for a core while the meter's
// runs, and every call on that connection is late together, so the
// deadline must cover it. Leaving out every stall the meter saw, freezes
// or not, opened the circuit on a healthy Redis in 5 of 10 runs of
// TestBusyHost at load 5 to 17; keeping them all raised a frozen
// process's deadline to its ceiling, and a blackhole then took five
// ceilings to find.
//
// For a tenth of the window after [NewBreaker], and after the circuit
// closes, every call gets the ceiling: a cold client opens its
// connections and loads its scripts on its first calls, which a deadline
// made for a warm client's would cut off, though the store is healthy.
// Their latencies count like any other's, so that the deadline the
// warm-up ends with is the one the store has shown meanwhile: a cold
// client's slowest calls raise it for a second or two, which errs on the
// safe side. Left out, they left the deadline at its floor as the
// warm-up ended, and on a busy host a whole round of calls then timed
// out together (TestBusyHost's cold start, one round of its 64 callers
// in most runs at load 10 to 12, the circuit opened in one).
//
// A deadline of its own would cost each call a timer added to and removed
// from the runtime's heap, more than the rest of the breaker. Calls that
// start within one tick (a sixteenth of the deadline) instead share one
// that ends once the process has run for the deadline after the tick
// began, and each inline call wraps it with the caller's values, in a
// context from a slab (newCallContext). Each call thus has at least
// fifteen sixteenths of the deadline of the process's time.
type deadlines struct {
	floor, ceiling int64 // ns
	m              *meter
	timeout        atomic.Int64 // the per-call deadline now, ns
	warmUntil      atomic.Int64 // the process clock until which calls get the ceiling
	cur            atomic.Pointer[tick]
	every          atomic.Uint64             // one answered call in every is timed, a power of two (see timed)
	_              [cacheLine]byte           // lat, which calls write, apart from what they read
	lat            [latBuckets]atomic.Uint64 // timed calls' latencies (see latBucket)
	adapts         int                       // adapt's calls, counted by the meter's goroutine
	calls          uint64                    // the calls made by adapt's latest call, for the rate
}

// cacheLine is the size of a processor's cache line, or more: fields
// that every call writes are kept this far from those that every call
// only reads (false sharing).
const cacheLine = 64

// Timing a call takes a reading of the clock when it is answered, a
// fifth of a call's work in the breaker. At a high rate of calls a
// sample serves as well: one in every answered calls, picked at random,
// is timed, so that at least minTimed calls are timed between two calls
// of adapt, and every call at a rate below it (25,600 a second). The
// sample's quantile is the calls'; a stall that makes many calls late
// makes their sample late alike. The counts weighed span about two
// seconds, so at least 51,200 timed calls, 51 of them beyond the 99.9th
// percentile.
const minTimed = 256

// Adapting the deadline: the meter's goroutine calls adapt every
// adaptBeats readings (10 ms), which halves the counts every decayAdapts
// calls (a second), so that the latencies weighed are mostly those of the
// last two seconds or so. A busy host's stalls recur, each a few tenths
// of a second apart: a deadline that forgot them as fast fell between
// them (to 25 ms with four burners at load 20), and the next stall timed
// out a whole round of callers at once. The deadline rises as soon as
// slow answers come; it only falls slowly.
const (
	adaptBeats   = 10
	decayAdapts  = 100
	adaptFactor  = 3
	adaptPerMill = 999 // the quantile weighed, in thousandths
)

// tick is the deadline shared by the calls that start within one tick.
type tick struct {
	start    int64           // the wall instant at which the tick began
	timeout  time.Duration   // the per-call deadline then
	earliest time.Time       // the soonest the deadline can end: a timeout after start
	ctx      *processContext // ends with the deadline
}

func newDeadlines(floor, ceiling time.Duration) *deadlines {
	d := &deadlines{floor: int64(floor), ceiling: int64(ceiling)}
	d.timeout.Store(int64(floor))
	d.every.Store(1)
	return d
}

// at returns the tick of a call starting at the wall instant now, making
// a new one if the current tick has passed. Racing callers may each make
// one; the last stored serves the calls after it, and each caller uses
// its own.
func (d *deadlines) at(now int64) *tick {
	if t := d.cur.Load(); t != nil && now-t.start < int64(t.timeout/16) {
		return t
	}
	timeout := time.Duration(d.timeout.Load())
	if d.m.at(now) < d.warmUntil.Load() { // a cold client connects
		timeout = time.Duration(d.ceiling)
	}
	t := &tick{
		start:    now,
		timeout:  timeout,
		earliest: d.m.base.Add(time.Duration(now) + timeout),
		ctx:      d.m.context(context.Background(), timeout, now),
	}
	d.cur.Store(t)
	return t
}

// stop ends the current tick's deadline, and with it its timer.
func (d *deadlines) stop() {
	if t := d.cur.Swap(nil); t != nil {
		t.ctx.stop()
	}
}

// timed reports whether an answered call is to be timed (see minTimed).
func (d *deadlines) timed() bool {
	n := d.every.Load()
	return n <= 1 || rand.Uint64()&(n-1) == 0
}

// observe counts an answered call that took took of the process's time.
func (d *deadlines) observe(took int64) { d.lat[latBucket(took)].Add(1) }

// adapt sets the per-call deadline from the latencies observed, and how
// many calls are timed from the calls made since its last call; the
// meter's goroutine calls it every adaptBeats readings.
func (d *deadlines) adapt() {
	calls := d.m.activity.Load()
	n := (calls - d.calls) / minTimed // the most calls one timed may stand for
	d.every.Store(max(1, uint64(1)<<bits.Len64(n)>>1))
	d.calls = calls
	var counts [latBuckets]uint64
	var total uint64
	for i := range d.lat {
		counts[i] = d.lat[i].Load()
		total += counts[i]
	}
	if d.adapts++; d.adapts%decayAdapts == 0 {
		for i := range d.lat {
			if c := counts[i]; c > 0 {
				d.lat[i].Add(^(c - c/2 - 1)) // less half: calls counted meanwhile stay whole
			}
		}
	}
	if total == 0 {
		return
	}
	want := total * adaptPerMill / 1000
	var seen uint64
	for i, c := range counts {
		if seen += c; seen > want {
			d.timeout.Store(min(max(adaptFactor*latBound(i), d.floor), d.ceiling))
			return
		}
	}
}

// latBuckets buckets latencies up to about a second, in units of 1024 ns:
// one a unit below 4, then four an octave.
const latBuckets = 80

// latBucket returns the bucket of a latency of ns.
func latBucket(ns int64) int {
	v := uint64(max(ns, 0)) >> 10
	if v < 4 {
		return int(v)
	}
	n := bits.Len64(v) // 3 or more
	return min(4*(n-2)+int(v>>(n-3))&3, latBuckets-1)
}

// latBound returns the upper bound of bucket i, in ns.
func latBound(i int) int64 {
	if i < 4 {
		return int64(i+1) << 10
	}
	n, sub := i/4+2, int64(i%4)
	return (5 + sub) << (n - 3) << 10
}

// expired reports whether the tick's deadline ended because the process
// ran for the timeout without an answer: time the store had.
func (t *tick) expired() bool { return t.ctx.pd.ended() == ranOut }

// callContext is an inline call's context: the caller's values, and the
// tick's deadline on the process clock. It does not end when the
// caller's context is cancelled: propagating that would cost what the
// tick saves (package context merges two contexts with a timer or a
// registration, three or four allocations), for calls that in the steady
// state last one round trip. The call runs at most until the deadline,
// and the breaker then reports the caller's cancellation (see
// callerEnded). A caller's context ending no later than the tick's
// earliest end is used as it is, without a callContext.
//
// It reports no Deadline: no instant on the wall clock is its end. A
// client that sets its socket's deadline from the context's (rueidis does
// for a lone call) would cut a reply short across a stall of the process;
// without one, both clients wait on Done.
type callContext struct {
	context.Context // the caller's, for its values
	tick            *tick
}

// newCallContext returns a call's context: the caller's ctx, under tick
// t's deadline. Contexts are allocated callSlab at a time, from a pool
// that keeps a slab for each processor: one allocation serves many
// calls. Each context serves one call only, as a client may keep one
// after the call returns; a slab is collected once none of its contexts
// is held, and a slab not yet used up holds the callers' contexts it has
// served until it is, or until the pool lets it go at a collection.
func newCallContext(ctx context.Context, t *tick) *callContext {
	s := callSlabs.Get().(*callSlab)
	c := &s.ctxs[s.used]
	c.Context, c.tick = ctx, t
	if s.used++; s.used < len(s.ctxs) {
		callSlabs.Put(s)
	}
	return c
}

// callSlab is callContexts allocated together (see newCallContext).
type callSlab struct {
	ctxs [32]callContext
	used int
}

var callSlabs = sync.Pool{New: func() any { return new(callSlab) }}

// Deadline reports none (see callContext).
func (c *callContext) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done is closed when the tick's deadline ends.
func (c *callContext) Done() <-chan struct{} { return c.tick.ctx.Done() }

// Err returns context.DeadlineExceeded once the tick's deadline has
// ended, else nil.
func (c *callContext) Err() error { return c.tick.ctx.Err() }

// AfterFunc runs f once the context ends. Package context finds it, so a
// context derived from a callContext registers with the tick's context
// instead of starting a goroutine to wait for it, and ends with
// context.DeadlineExceeded.
func (c *callContext) AfterFunc(f func()) func() bool { return c.tick.ctx.AfterFunc(f) }
