package policy

import (
	"testing"
	"time"
)

// TestFailureRun checks the run rule's count on the process clock: a
// run's failures count while the run is within a window, and once it is
// longer, those of the last window do; a success or a change of state
// ends the run.
func TestFailureRun(t *testing.T) {
	t.Parallel()
	const ms = int64(time.Millisecond)
	window := int64(DefaultWindow)
	newRun := func() *failureRun { return &failureRun{tenth: window / 10} }

	// One caller's timeouts, a deadline of 52 ms apart: however slowly
	// the wall clock saw them come, the five are in one window of the
	// process clock, and the run spans three deadlines.
	r := newRun()
	at := 5 * window
	for range 5 {
		at += 52 * ms
		r.fail(at, true)
	}
	if got := r.inWindow(at); got != 5 || at-r.start != 4*52*ms || !r.lapsed {
		t.Errorf("five failures 52 ms apart: %d in the window, spanning %v, lapsed %v; want 5, %v, true", got, time.Duration(at-r.start), r.lapsed, 4*52*time.Millisecond)
	}

	// A quiet service's failures, 400 ms apart: never five in a window.
	r = newRun()
	at = 5 * window
	for i := range 20 {
		at += 400 * ms
		r.fail(at, false)
		if got := r.inWindow(at); got >= 5 {
			t.Fatalf("failure %d of a run 400 ms apart: %d in the window, want at most 3", i+1, got)
		}
	}
	// The same run turns dense: the last window's failures count.
	for range 5 {
		at += 10 * ms
		r.fail(at, false)
	}
	if got := r.inWindow(at); got < 5 || got > 8 {
		t.Errorf("five failures 10 ms apart after a sparse run: %d in the window, want 5 to 8", got)
	}

	// Instants a little before the clock's origin, as a reading taken
	// while the meter records a stall can be, count as the origin.
	r = newRun()
	r.fail(-3*ms, true)
	r.fail(-1, false)
	if got := r.inWindow(-ms); got != 2 || r.start != 0 {
		t.Errorf("failures before the origin: %d in the window, start %d; want 2, 0", got, r.start)
	}

	// A success ends the run; the next failure begins one.
	r.end()
	at += 10 * ms
	r.fail(at, false)
	if got := r.inWindow(at); got != 1 || r.start != at || r.lapsed {
		t.Errorf("after a success: %d in the window, start %d (want %d), lapsed %v", got, r.start, at, r.lapsed)
	}
}
