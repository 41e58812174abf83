package policy

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// A breaker keeps time on the process clock: a monotonic clock that stops
// while this process is not running.
//
// A deadline on the wall clock counts the time the process was frozen (a
// container over its CPU quota waits for the next period), waiting for a
// core (other processes on a busy host), or paused by the collector. A
// reply that arrived meanwhile sits unread in its socket; when the
// process runs again the wall deadline has passed, and the call fails
// through no fault of the store. On a busy host that turns a healthy
// store into a failing one. So a call's deadline, and every span the trip
// rule weighs, is measured on the process clock: the store is given the
// time it was owed.
//
// The process clock is read off a stall meter, as latency tools' "hiccup"
// meters do: a goroutine of the breaker's that sleeps a millisecond at a
// time. While it wakes on time the process clock keeps pace with the wall
// clock; when it wakes late, the clock has advanced by at most one step
// (meterStep) since its last reading, whatever the wall clock did. A
// reading between two of the meter's is capped alike, so a reading taken
// as the process resumes, before the meter has run, already leaves the
// stall out.
//
// Each reading also notes the process's CPU time (getrusage, about 0.2
// µs, a thousand times a second while calls are made). A stall across
// which the process ran less than a quarter of it, on all its threads
// together, was a freeze of the whole process, and is added up apart
// (frozen): the deadline's latencies leave it out (see deadlines).

const (
	// meterBeat is how long the meter sleeps between readings.
	meterBeat = time.Millisecond
	// meterSlack is how late a wake-up may be and still count in full:
	// the scheduler's ordinary delay in waking a goroutine.
	meterSlack = time.Millisecond
	// meterStep is the most the process clock advances between two
	// readings of the meter.
	meterStep = int64(meterBeat + meterSlack)
	// meterIdle is how many readings the meter takes with no call made
	// to the store before it rests; the next call wakes it.
	meterIdle = 100
)

// meter is a breaker's stall meter, the source of its process clock. Its
// goroutine runs from [NewBreaker] to Close, and rests (blocked, costing
// nothing) while no calls are made.
type meter struct {
	base     time.Time               // the origin of the instants below, in ns after it
	activity *atomic.Uint64          // counts the calls that need the clock
	every    func()                  // called by the goroutine every adaptBeats readings
	last     atomic.Pointer[reading] // the latest reading, and whether the meter rests
	wake     chan struct{}           // a resting meter's alarm (buffered)
	stop     chan struct{}
	done     chan struct{}
}

// reading is one of the meter's readings. Whether the meter rests is
// part of it, so that a reader sees the state and the reading it applies
// to together: a reading of a resting meter read as an awake one's would
// set the clock back by as long as the meter rested.
type reading struct {
	wall    int64 // the wall clock's monotonic instant
	proc    int64 // the process clock then
	cpu     int64 // the process's CPU time then, ns; -1 if not known
	frozen  int64 // the stalls so far in which no thread of the process ran, ns
	resting bool  // the meter rests: the clock follows the wall clock from here
}

// startMeter starts a meter whose instants are ns after base, resting
// until a call, counted by activity, wakes it (see awake). While awake,
// its goroutine calls every (if not nil) every adaptBeats readings.
func startMeter(base time.Time, activity *atomic.Uint64, every func()) *meter {
	m := &meter{
		base:     base,
		activity: activity,
		every:    every,
		wake:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	now := m.wallNow()
	m.last.Store(&reading{wall: now, proc: now, cpu: -1, resting: true})
	go m.run()
	return m
}

// wallNow returns the wall clock's monotonic instant, ns after m.base.
func (m *meter) wallNow() int64 { return int64(time.Since(m.base)) }

// close stops the meter's goroutine and waits for it to end. The clock
// then keeps pace with the wall clock, for the deadlines still running.
func (m *meter) close() {
	close(m.stop)
	<-m.done
	m.rest()
}

// rest marks the meter as resting from its latest reading. Only the
// meter's goroutine, or close once it has ended, calls it: no one else
// stores a reading while the meter is awake.
func (m *meter) rest() {
	r := *m.last.Load()
	r.resting = true
	m.last.Store(&r)
}

// awake wakes the meter if it rests, before a call reads the clock. The
// time it rested counts in full: no call was timed meanwhile.
func (m *meter) awake(now int64) {
	if m.last.Load().resting && m.wakeAt(now) {
		select {
		case m.wake <- struct{}{}:
		default:
		}
	}
}

// wakeAt ends the meter's rest at the wall instant now, and reports
// whether it did: false if the meter was awake, or another call woke it
// first, or it has closed.
func (m *meter) wakeAt(now int64) bool {
	last := m.last.Load()
	if !last.resting {
		return false
	}
	select {
	case <-m.stop:
		return false
	default:
	}
	r := &reading{wall: now, proc: last.proc + max(now-last.wall, 0), cpu: -1, frozen: last.frozen}
	return m.last.CompareAndSwap(last, r)
}

// run takes readings until close, resting while no calls are made.
func (m *meter) run() {
	defer close(m.done)
	t := time.NewTimer(meterBeat)
	t.Stop()
	for {
		// An alarm left from a wake-up the meter saw without it (below)
		// finds it resting again: it waits on.
		for m.last.Load().resting {
			select {
			case <-m.stop:
				return
			case <-m.wake:
			}
		}
		idle, calls := 0, m.activity.Load()
		t.Reset(meterBeat)
		for beats := 1; idle < meterIdle; beats++ {
			select {
			case <-m.stop:
				return
			case <-t.C:
			}
			now := m.wallNow()
			last := m.last.Load()
			r := &reading{wall: now, proc: last.proc + min(now-last.wall, meterStep), cpu: processCPU(), frozen: last.frozen}
			// A stall across which the process used almost no CPU time
			// was a freeze of every thread (a stop, a CPU quota): no
			// reply could be read in it either.
			if stall := now - last.wall - meterStep; stall > 0 && r.cpu >= 0 && last.cpu >= 0 && r.cpu-last.cpu < stall/freezeShare {
				r.frozen += stall
			}
			m.last.Store(r)
			if c := m.activity.Load(); c != calls {
				idle, calls = 0, c
			} else {
				idle++
			}
			if m.every != nil && beats%adaptBeats == 0 {
				m.every()
			}
			t.Reset(meterBeat)
		}
		t.Stop()
		// The clock at rest follows the wall clock from the last reading.
		m.rest()
		// A call that found the meter awake just before made no sound:
		// look once more, so that it is not timed on a resting clock for
		// long.
		if m.activity.Load() != calls {
			m.wakeAt(m.wallNow())
		}
	}
}

// freezeShare: a stall is a freeze if the process ran less than a
// freezeShare-th of it, on all its threads together.
const freezeShare = 4

// frozen returns the time so far in stalls in which no thread of the
// process ran (see reading).
func (m *meter) frozen() int64 { return m.last.Load().frozen }

// at returns the process clock at the wall instant now (ns after base).
// While the meter rests it keeps pace with the wall clock: no call is
// being timed. now is the present: an instant before the last reading is
// projected back from it at the wall clock's pace, counting in full any
// stall since, so a span is timed by readings taken at its start and at
// its end. Read at instants in order, the clock does not go back from one
// reading to the next if both instants follow the latest reading; an
// instant read just before a reading that records a stall and one just
// after can come out lower, by at most the stall, so a span read that
// way may be a little below zero, and its readers count it as zero.
func (m *meter) at(now int64) int64 {
	r := m.last.Load()
	if r.resting {
		return r.proc + now - r.wall
	}
	return r.proc + min(now-r.wall, meterStep)
}

// A processDeadline ends once the process has run for a span after it
// began, or once a bound on the wall clock has passed, whichever is
// first, and then calls its function, once (or sooner, at stop).
type processDeadline struct {
	m      *meter
	start  int64 // the process clock at the start
	span   int64 // ns of process time
	bound  int64 // the wall instant by which it ends whatever the process did
	timer  *time.Timer
	end    func()
	once   sync.Once
	reason atomic.Uint32 // why it ended: an endReason
}

// endReason says why a processDeadline ended.
type endReason uint32

const (
	running endReason = iota
	ranOut            // the process ran for the span: the store had its time
	bounded           // the wall bound passed first: the process did not run
	stopped           // stopped early
)

// stallBound is how far the process's stalls may stretch a deadline on
// the wall clock. Beyond it a call ends even though the process has not
// run for its span, and the store is not blamed.
const stallBound = time.Second

// deadline returns a deadline of span on the process clock, begun at the
// wall instant now, that calls end once it ends.
func (m *meter) deadline(span time.Duration, now int64, end func()) *processDeadline {
	p := &processDeadline{
		m:     m,
		start: m.at(now),
		span:  int64(span),
		bound: now + int64(span+stallBound),
		end:   end,
	}
	// Armed once stored, as check resets it.
	p.timer = time.AfterFunc(time.Hour, p.check)
	p.timer.Stop()
	p.timer.Reset(span)
	return p
}

// check ends the deadline if its span has run out or its bound has
// passed, and else waits for the rest of the span.
func (p *processDeadline) check() {
	now := p.m.wallNow()
	left := p.span - (p.m.at(now) - p.start)
	switch {
	case left <= 0:
		p.finish(ranOut)
	case now >= p.bound:
		p.finish(bounded)
	default:
		p.timer.Reset(time.Duration(min(left, p.bound-now)))
	}
}

// finish ends the deadline for reason, unless it has ended.
func (p *processDeadline) finish(reason endReason) {
	p.once.Do(func() {
		p.reason.Store(uint32(reason))
		p.end()
	})
}

// stop ends the deadline now.
func (p *processDeadline) stop() {
	p.timer.Stop()
	p.finish(stopped)
}

// ended returns why the deadline ended, or running.
func (p *processDeadline) ended() endReason { return endReason(p.reason.Load()) }

// processContext is a context that ends with its parent, or once the
// process has run for a span (see processDeadline), when its Err, and
// that of every context derived from it, is context.DeadlineExceeded. It
// reports no Deadline: no instant on the wall clock is its end.
type processContext struct {
	inner  context.Context // the parent's values and cancellation
	cancel context.CancelFunc
	pd     *processDeadline
}

// context returns a context that ends with parent, or once the process
// has run for span after the wall instant now.
func (m *meter) context(parent context.Context, span time.Duration, now int64) *processContext {
	inner, cancel := context.WithCancel(parent)
	c := &processContext{inner: inner, cancel: cancel}
	c.pd = m.deadline(span, now, cancel)
	return c
}

// stop ends the context now, with context.Canceled, and its timer.
func (c *processContext) stop() { c.pd.stop() }

// Deadline reports none.
func (c *processContext) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done is closed when the context ends.
func (c *processContext) Done() <-chan struct{} { return c.inner.Done() }

// Err returns context.DeadlineExceeded once the span has run out (or the
// wall bound passed), the parent's error if it ended first, and nil
// while the context runs.
func (c *processContext) Err() error {
	err := c.inner.Err()
	if err != nil {
		if r := c.pd.ended(); r == ranOut || r == bounded {
			return context.DeadlineExceeded
		}
	}
	return err
}

// Value returns the parent's value for key.
func (c *processContext) Value(key any) any { return c.inner.Value(key) }

// AfterFunc runs f once the context ends. Package context finds it, so a
// context derived from this one registers here, without a goroutine to
// watch it, and ends with this one's Err.
func (c *processContext) AfterFunc(f func()) func() bool { return context.AfterFunc(c.inner, f) }
