package redisfaults

import (
	"testing"
	"time"
)

func TestCheckGrid(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const iv = 20 * time.Millisecond
	// rel is a release decided within [at, at+w], scheduled d later.
	rel := func(at, w, d time.Duration) Release {
		return Release{Called: t0.Add(at), Decided: t0.Add(at + w), Delay: d}
	}
	line := []Release{rel(0, time.Millisecond, 0), rel(time.Millisecond, time.Millisecond, 19*time.Millisecond), rel(2*time.Millisecond, time.Millisecond, 38*time.Millisecond)}
	if n, _, err := CheckGrid(line, iv); err != nil || n != 0 {
		t.Errorf("a line on a 20ms grid: %d restarts, %v; want 0, nil", n, err)
	}
	// The line empties (the last release at 40 ms), and a new one starts
	// 100 ms in: a grid of its own.
	again := append(line, rel(100*time.Millisecond, time.Millisecond, 0), rel(101*time.Millisecond, time.Millisecond, 19*time.Millisecond))
	if n, _, err := CheckGrid(again, iv); err != nil || n != 1 {
		t.Errorf("a line that emptied and started again: %d restarts, %v; want 1, nil", n, err)
	}
	// Two released at once: off the grid, and too close to restart.
	twice := append(line, rel(3*time.Millisecond, time.Millisecond, 37*time.Millisecond))
	if _, _, err := CheckGrid(twice, iv); err == nil {
		t.Error("two releases at one instant passed")
	}
}
