package policy

import (
	"context"
	"sync/atomic"
	"time"
)

// deadlines gives the breaker's inline calls their contexts, each ending
// at the per-call deadline, without a timer for each call.
//
// context.WithDeadline costs four allocations and a timer added to and
// removed from the runtime's heap on every call, more than the rest of
// the breaker. Calls that start within one tick (a sixteenth of the
// timeout) instead share one context that ends a timeout after the tick
// began, and each call wraps it with the caller's values, one allocation.
// Each call thus returns by the per-call deadline, and has at least
// fifteen sixteenths of it.
type deadlines struct {
	timeout, tick time.Duration
	base          time.Time // the origin of the instants below
	cur           atomic.Pointer[tick]
}

// tick is the context shared by the calls that start within one tick.
type tick struct {
	start    int64 // ns after base at which the tick began
	deadline time.Time
	ctx      context.Context // ends at deadline
	cancel   context.CancelFunc
}

func newDeadlines(timeout time.Duration, base time.Time) *deadlines {
	return &deadlines{timeout: timeout, tick: max(timeout/16, 1), base: base}
}

// at returns the tick of a call starting at now (ns after base), making a new one if the
// current tick has passed. Racing callers may each make one; the last
// stored serves the calls after it, and each caller uses its own.
func (d *deadlines) at(now int64) *tick {
	if t := d.cur.Load(); t != nil && now-t.start < int64(d.tick) {
		return t
	}
	deadline := d.base.Add(time.Duration(now) + d.timeout)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	t := &tick{start: now, deadline: deadline, ctx: ctx, cancel: cancel}
	d.cur.Store(t)
	return t
}

// stop ends the current tick's context, and with it its timer.
func (d *deadlines) stop() {
	if t := d.cur.Swap(nil); t != nil {
		t.cancel()
	}
}

// callContext is an inline call's context: the caller's values, and the
// deadline of the tick the call started in. It does not end when the
// caller's context is cancelled: propagating that would cost what the
// tick saves (package context merges two contexts with a timer or a
// registration, three or four allocations), for calls that in the steady
// state last one round trip. The call runs at most until the deadline,
// and the breaker then reports the caller's cancellation (see
// callerEnded). A caller's context ending no later than the deadline is
// used as it is, without a callContext.
type callContext struct {
	context.Context // the caller's, for its values
	tick            *tick
}

// Deadline returns the tick's deadline.
func (c *callContext) Deadline() (time.Time, bool) { return c.tick.deadline, true }

// Done is closed at the tick's deadline.
func (c *callContext) Done() <-chan struct{} { return c.tick.ctx.Done() }

// Err returns context.DeadlineExceeded once the tick's deadline has
// passed, else nil.
func (c *callContext) Err() error { return c.tick.ctx.Err() }

// AfterFunc runs f once the context ends. Package context finds it, so a
// context derived from a callContext registers with the tick's context
// instead of starting a goroutine to wait for it.
func (c *callContext) AfterFunc(f func()) func() bool { return context.AfterFunc(c.tick.ctx, f) }
