package cputime_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/cputime"
)

// TestProcessCountsWork: spinning for a while of wall time adds about as
// much CPU time, and sleeping adds far less than it waits.
func TestProcessCountsWork(t *testing.T) {
	before, err := cputime.Process()
	if err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); time.Since(start) < 50*time.Millisecond; {
	}
	spun, err := cputime.Process()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	slept, err := cputime.Process()
	if err != nil {
		t.Fatal(err)
	}
	// A shared machine may take the CPU away while the loop spins, so
	// the bound is loose; a clock that did not count would give 0.
	if got := spun - before; got < 5*time.Millisecond {
		t.Errorf("50 ms of spinning counted %v of CPU time", got)
	}
	if got := slept - spun; got > 50*time.Millisecond {
		t.Errorf("100 ms of sleep counted %v of CPU time", got)
	}
}
