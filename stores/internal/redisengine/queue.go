package redisengine

import (
	"context"
	"runtime"
	"sync"

	"github.com/sluicehq/sluice/core"
)

// DefaultSenders is how many rounds a queue has in flight at once
// unless its Senders says otherwise: one, so that every call that
// arrives during a round trip goes in the next round, one write and one
// read for all of them (and on one server one merged script call), which
// is what a decision costs the client's and the server's CPU. With more
// in flight, the calls that arrive during one round trip are spread over
// several rounds: at 64 goroutines on one key, 0.035 script calls per
// decision with two (0.097 with four, before senders yielded; see send)
// against 0.022 with one.
const DefaultSenders = 1

// Entry is one caller's call. A store embeds it in its own call, or points
// Item at that, and reads the result the send function left there. An
// Entry for which Do returned nil may be queued again.
type Entry struct {
	// Ctx is the caller's context, set by Do.
	Ctx context.Context
	// Item is the store's own call.
	Item any
	// done receives once the entry's round has been sent. It is made once
	// per Entry, buffered, so that the sender never waits for a caller who
	// gave up, and an Entry used again needs no new channel.
	done chan struct{}
}

// Queue sends queued calls in rounds through Send. The zero Queue, with
// Send set, is ready to use.
type Queue struct {
	// Send sends a round of calls whose callers still wait and leaves each
	// call's result in its Item. It runs on a sender's goroutine, one
	// round at a time per sender, and must not keep the round.
	Send func(round []*Entry)
	// Senders is how many rounds may be in flight at once; 0 means
	// DefaultSenders.
	Senders int

	mu      sync.Mutex
	queue   []*Entry
	senders int
	closed  bool
	wg      sync.WaitGroup // the senders
}

// Do queues c and waits until its round has been sent, returning nil, or
// until ctx ends, returning ctx's error: a call whose ctx has ended by the
// time its round is sent is not sent, and one already sent may still be
// applied. After Close it fails with [core.ErrClosed]. A sender's
// goroutine sends the round, never the caller's, so that a caller returns
// at its context's end even while Send is held past it (a client that
// holds its calls behind a dial, whatever their contexts say).
func (q *Queue) Do(ctx context.Context, c *Entry) error {
	c.Ctx = ctx
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return core.ErrClosed
	}
	most := q.Senders
	if most == 0 {
		most = DefaultSenders
	}
	if c.done == nil {
		c.done = make(chan struct{}, 1)
	}
	q.queue = append(q.queue, c)
	if q.senders < most {
		q.senders++
		q.wg.Add(1)
		go q.send()
	}
	q.mu.Unlock()
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// send sends the queue, round after round, until it finds it empty.
// Having woken a round's callers it yields its processor once before it
// takes the queue again, so that those who call again at once (a loop
// of decisions, a handler's next request) join the next round instead of
// leaving it to the few who were quicker.
func (q *Queue) send() {
	defer q.wg.Done()
	var round, live []*Entry
	for {
		q.mu.Lock()
		round, q.queue = q.queue, round[:0]
		if len(round) == 0 {
			q.senders--
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		// A caller that gave up has been told its call failed: it must
		// not be charged, and a Redis that was slow must not be sent
		// every call abandoned while it was.
		for _, c := range round {
			if c.Ctx.Err() == nil {
				live = append(live, c)
			}
		}
		if len(live) > 0 {
			q.Send(live)
		}
		clear(live) // the calls belong to their callers
		live = live[:0]
		for i, c := range round {
			c.done <- struct{}{}
			round[i] = nil
		}
		runtime.Gosched()
	}
}

// Close stops new calls and waits for the senders to finish the rounds
// already queued.
func (q *Queue) Close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.wg.Wait()
}
