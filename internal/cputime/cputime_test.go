package cputime_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/cputime"
)

// TestProcessCountsWork: spinning adds CPU time, and sleeping adds far
// less than it waits. The spin lasts until 20 ms of CPU time are counted,
// which a clock that did not count would never reach; a machine that
// shares its cores only makes that take longer on the wall clock.
func TestProcessCountsWork(t *testing.T) {
	before, err := cputime.Process()
	if err != nil {
		t.Fatal(err)
	}
	spun := before
	for start := time.Now(); spun-before < 20*time.Millisecond; {
		if time.Since(start) > time.Minute {
			t.Fatalf("a minute of spinning counted %v of CPU time", spun-before)
		}
		for range 1 << 16 {
		}
		if spun, err = cputime.Process(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	slept, err := cputime.Process()
	if err != nil {
		t.Fatal(err)
	}
	if got := slept - spun; got > 50*time.Millisecond {
		t.Errorf("100 ms of sleep counted %v of CPU time", got)
	}
}
