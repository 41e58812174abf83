package redisfaults

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
)

// Canary is a goroutine that only sleeps, a millisecond at a time, and
// keeps its worst lateness: how long the process stalled while it ran (a
// machine shared with other jobs, a collection). A decision late by as
// much as a goroutine that only slept is the machine's, not the store's.
type Canary struct {
	done  chan struct{}
	worst chan time.Duration
}

// StartCanary starts a canary; [Canary.Stop] ends it.
func StartCanary() *Canary {
	c := &Canary{done: make(chan struct{}), worst: make(chan time.Duration, 1)}
	go func() {
		var worst time.Duration
		for {
			select {
			case <-c.done:
				c.worst <- worst
				return
			default:
			}
			before := time.Now()
			time.Sleep(time.Millisecond)
			worst = max(worst, time.Since(before)-time.Millisecond)
		}
	}()
	return c
}

// Stop ends the canary and returns its worst lateness. A stall still
// under way is measured when the canary next wakes.
func (c *Canary) Stop() time.Duration {
	close(c.done)
	return <-c.worst
}

// FlushThroughBreaker runs [FlushUnderLoad] through breaker, a
// policy.Breaker with the per-call deadline deadline over a store on srv
// no error may reach a caller, and the circuit must never change
// state (changes reports how often it did), unless a canary saw the
// process stall for three deadlines or more meanwhile. A shorter stall
// times out the calls under way, whatever Redis does, but no more: the
// circuit opens only on failures that span three deadlines with no
// success between them, or on half a window's calls (policy.WithTrip).
// It returns what FlushUnderLoad saw and the canary's worst stall.
func FlushThroughBreaker(t *testing.T, srv *redistest.Server, breaker core.Store, deadline time.Duration, changes func() uint64) (FlushResult, time.Duration) {
	t.Helper()
	c := StartCanary()
	r := FlushUnderLoad(t, srv, breaker)
	stall := c.Stop()
	switch n := changes(); {
	case n == 0:
	case stall < 3*deadline:
		t.Errorf("the circuit changed state %d times, want never; the process stalled at most %v meanwhile", n, stall)
	default:
		t.Logf("the circuit changed state %d times, excused: the process stalled %v meanwhile", n, stall)
	}
	return r, stall
}
