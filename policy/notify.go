package policy

import (
	"sync"
	"sync/atomic"
)

// maxPending bounds the changes waiting for the user's function. Changes
// come at most a few per open timeout, so only a function that blocks
// falls this far behind; the oldest are then dropped.
const maxPending = 1024

// notifier delivers changes of state to the user's function outside
// gobreaker's lock: push records a change (under that lock), and flush,
// called by each call after it leaves the breaker, delivers what is
// pending. One goroutine delivers at a time, in order; the others go on
// with their calls, and one whose own call delivers nothing (the
// function calling the breaker) returns at once.
type notifier struct {
	fn      func(Change)
	pending atomic.Int32 // len(queue), read without the lock

	mu    sync.Mutex // guards queue
	queue []Change

	deliver sync.Mutex // held by the goroutine delivering
}

// push queues c. It is called with gobreaker's lock held, so it only
// takes mu, which is never held while calling into gobreaker.
func (n *notifier) push(c Change) {
	if n.fn == nil {
		return
	}
	n.mu.Lock()
	if len(n.queue) == maxPending {
		n.queue = append(n.queue[:0], n.queue[1:]...)
	}
	n.queue = append(n.queue, c)
	n.pending.Store(int32(len(n.queue)))
	n.mu.Unlock()
}

// flush delivers the pending changes, unless another goroutine is
// delivering: that one checks again before it stops, so no change is
// left behind.
func (n *notifier) flush() {
	for n.pending.Load() > 0 {
		if !n.deliver.TryLock() {
			return
		}
		n.drain()
		// A change pushed after the last take, by a goroutine whose
		// TryLock failed, is seen by the loop's check.
	}
}

// drain delivers until the queue is empty. The caller holds deliver, which
// drain releases even if the function panics.
func (n *notifier) drain() {
	defer n.deliver.Unlock()
	for {
		n.mu.Lock()
		batch := n.queue
		n.queue = nil
		n.pending.Store(0)
		n.mu.Unlock()
		if len(batch) == 0 {
			return
		}
		for _, c := range batch {
			n.fn(c)
		}
	}
}
