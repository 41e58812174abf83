package stores

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core"
)

// A Front gathers the calls of concurrent callers into batches for a
// store that decides a batch in one round trip ([core.Batcher]): while a
// batch is in flight, the calls that arrive wait in a queue, and the next
// batch takes them all. A caller waits for its batch or for its context's
// end, whichever comes first; a call whose caller has gone is dropped
// from a batch not yet formed. One goroutine sends the batches, while
// calls are queued, and exits when none are.
//
// The Redis stores put a Front before their engine. A decorator that is a
// Batcher over a store that has a Front ([Fronted]) takes the front over
// with [Lift]: its callers' calls gather above it, and it does its own
// work once a batch.
type Front struct {
	decide   func(ctx context.Context, calls []*core.Call)
	detached bool
	// entries holds entries answered, for the next calls: the front's
	// own, so that a front made in a synctest bubble keeps its channels
	// there. An entry whose caller gave up may still be in a batch, and is
	// left to the collector.
	entries sync.Pool

	mu      sync.Mutex
	queue   []*entry
	sending bool
	closed  bool
	wg      sync.WaitGroup // the sender
}

// Fronted is a [core.Batcher] whose callers' calls gather in a [Front].
type Fronted interface {
	core.Batcher
	Front() *Front
}

// NewFront returns a front that hands each batch to decide, on the
// sender's goroutine. decide must write every call's Out or Err, and keep
// no call once it returns. A detached front's batches run on a context
// that never ends, with the first call's values: for a store whose client
// bounds its round trips itself, and cuts a connection whose call's
// context ends (go-redis). Otherwise a batch's context ends once every
// call's context has ended.
func NewFront(decide func(ctx context.Context, calls []*core.Call), detached bool) *Front {
	f := &Front{decide: decide, detached: detached}
	f.entries.New = func() any { return &entry{done: make(chan struct{}, 1)} }
	return f
}

// Lift returns the front of a decorator over inner that decides its
// batches with decide: a front like inner's, if inner is [Fronted], or
// nil. decide runs the decorator's work on a batch and hands the batch on
// to inner's ApplyBatch, never to inner's front.
func Lift(inner core.Store, decide func(ctx context.Context, calls []*core.Call)) *Front {
	f, ok := inner.(Fronted)
	if !ok || f.Front() == nil {
		return nil
	}
	return NewFront(decide, f.Front().detached)
}

// entry is a call in the queue, with room for its requests.
type entry struct {
	call core.Call
	req  [1]core.Request
	out  [1]core.Decision
	// reqs and outs hold a group's copies, kept for the next group.
	reqs []core.Request
	outs []core.Decision
	// done receives once the entry's batch has been decided. It is made
	// once per entry, buffered, so that the sender never waits for a
	// caller who gave up.
	done chan struct{}
}

// Apply decides req in the next batch, as the store's Apply would.
func (f *Front) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	e := f.entries.Get().(*entry)
	e.req[0] = req
	e.call = core.Call{Ctx: ctx, Reqs: e.req[:], Out: e.out[:]}
	if err := f.wait(e); err != nil {
		return core.Decision{}, err
	}
	d, err := e.out[0], e.call.Err
	f.free(e)
	return d, err
}

// ApplyAll decides reqs together in the next batch, as the store's
// ApplyAll would. The batch works on copies of reqs and out, which the
// caller may reuse however its call ends.
func (f *Front) ApplyAll(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	e := f.entries.Get().(*entry)
	e.reqs = append(e.reqs[:0], reqs...)
	e.outs = slices.Grow(e.outs[:0], len(out))[:len(out)]
	e.call = core.Call{Ctx: ctx, Reqs: e.reqs, Out: e.outs}
	if err := f.wait(e); err != nil {
		return err
	}
	err := e.call.Err
	if err == nil {
		copy(out, e.call.Out)
	}
	f.free(e)
	return err
}

// free hands e, answered, to the next call.
func (f *Front) free(e *entry) {
	e.req[0], e.out[0] = core.Request{}, core.Decision{}
	clear(e.reqs) // their terms belong to their callers
	clear(e.outs)
	e.call = core.Call{}
	f.entries.Put(e)
}

// wait queues e and waits for its batch, returning nil, or for its
// context's end, returning the context's error. After Close it fails
// with [core.ErrClosed].
func (f *Front) wait(e *entry) error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return core.ErrClosed
	}
	f.queue = append(f.queue, e)
	if !f.sending {
		f.sending = true
		f.wg.Add(1)
		go f.send()
	}
	f.mu.Unlock()
	select {
	case <-e.done:
		return nil
	case <-e.call.Ctx.Done():
		return e.call.Ctx.Err()
	}
}

// send decides the queue, batch after batch, until it finds it empty.
// Having woken a batch's callers it yields its processor once before it
// takes the queue again, so that those who call again at once (a loop of
// decisions, a handler's next request) join the next batch instead of
// leaving it to the few who were quicker.
func (f *Front) send() {
	defer f.wg.Done()
	var batch []*entry
	var live []*core.Call
	for {
		f.mu.Lock()
		batch, f.queue = f.queue, batch[:0]
		if len(batch) == 0 {
			f.sending = false
			f.mu.Unlock()
			return
		}
		f.mu.Unlock()
		// A caller that gave up has been told its call failed: it must
		// not be charged, and a store that was slow must not be sent
		// every call abandoned while it was.
		for _, e := range batch {
			if e.call.Ctx.Err() == nil {
				live = append(live, &e.call)
			}
		}
		if len(live) > 0 {
			ctx, stop := f.context(live)
			f.decide(ctx, live)
			stop()
		}
		clear(live) // the calls belong to their callers
		live = live[:0]
		for i, e := range batch {
			e.done <- struct{}{}
			batch[i] = nil
		}
		runtime.Gosched()
	}
}

// Close stops new calls and waits for the batches already queued.
func (f *Front) Close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.wg.Wait()
}

// context returns the context a batch is decided on, and what releases
// it: a detached front's, or a batch of one call's, or one that ends
// once every call's context has ended (see lastContext).
func (f *Front) context(calls []*core.Call) (context.Context, func()) {
	switch {
	case f.detached:
		return context.WithoutCancel(calls[0].Ctx), func() {}
	case len(calls) == 1:
		return calls[0].Ctx, func() {}
	}
	return lastContext(calls)
}

// lastContext returns the context of a batch of calls: the values of its
// first call's context, ending once every call's has ended. Contexts
// that end at a deadline end the batch at the last of them, without
// registering with each; a context that ends without one (a breaker's
// ends on the process's clock) is watched, once for all the contexts
// that end together, by one Done channel: a breaker's calls share one
// for a sixteenth of its deadline, so that a batch of a hundred of them
// registers once or twice, not a hundred times. A call whose context
// never ends leaves the batch unbounded but for the client's own
// timeouts. stop releases what the context holds.
func lastContext(calls []*core.Call) (ctx context.Context, stop func()) {
	ctx = context.WithoutCancel(calls[0].Ctx)
	var last time.Time
	var watched []context.Context
	var dones []<-chan struct{} // watched's
	for _, c := range calls {
		if d, ok := c.Ctx.Deadline(); ok {
			if d.After(last) {
				last = d
			}
			continue
		}
		done := c.Ctx.Done()
		if done == nil {
			return ctx, func() {}
		}
		if !slices.Contains(dones, done) {
			watched, dones = append(watched, c.Ctx), append(dones, done)
		}
	}
	if len(watched) == 0 {
		return context.WithDeadline(ctx, last)
	}
	ctx, cancel := context.WithCancel(ctx)
	var left atomic.Int64
	left.Store(int64(len(watched)))
	end := func() {
		if left.Add(-1) == 0 {
			cancel()
		}
	}
	stops := make([]func() bool, 0, len(watched)+1)
	if !last.IsZero() {
		left.Add(1)
		t := time.AfterFunc(time.Until(last), end)
		stops = append(stops, t.Stop)
	}
	for _, c := range watched {
		stops = append(stops, context.AfterFunc(c, end))
	}
	return ctx, func() {
		for _, s := range stops {
			s()
		}
		cancel()
	}
}
