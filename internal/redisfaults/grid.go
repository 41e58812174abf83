package redisfaults

import (
	"fmt"
	"slices"
	"time"
)

// Release is a reservation seen from outside the store: its call's
// window, from when it was asked for to when the answer came back, and
// the Delay the answer gave. The store decided at an instant within the
// window, so the request's release, that instant plus Delay, lies within
// the window shifted by Delay.
type Release struct {
	Called, Decided time.Time
	Delay           time.Duration
}

// CheckGrid checks that releases leave one interval apart, as a shaped
// key releases its line: in order of their release (by the middle of
// each window), the k-th of a line
// at t0 + k × interval, one t0 fitting every call's window (within a
// microsecond, the rounding of Delay). A line starts again on a grid of
// its own only where it emptied: where the next release is certainly at
// least interval after the last, as when the test process stalled
// between two decisions for longer than interval, or where a call took
// longer than half an interval, which leaves the order of its release and
// the one before it unknown. It returns how many
// times a line started again and how wide the last line's t0 could be;
// two releases closer than interval are an error. releases is sorted in
// place.
func CheckGrid(releases []Release, interval time.Duration) (restarts int, fit time.Duration, err error) {
	at := func(r Release) time.Time { return r.Decided.Add(r.Delay) }
	// In line by the middle of each release's window: a call whose answer
	// came back late (the client's scheduling, not the store) has a late
	// Decided, and by its end alone would be put after a release the
	// store scheduled later.
	mid := func(r Release) time.Time { return r.Called.Add(r.Decided.Sub(r.Called)/2 + r.Delay) }
	slices.SortFunc(releases, func(a, b Release) int { return mid(a).Compare(mid(b)) })
	var lo, hi time.Time
	first := 0
	for k, r := range releases {
		grid := time.Duration(k-first) * interval
		l, h := r.Called.Add(r.Delay-grid-time.Microsecond), r.Decided.Add(r.Delay-grid)
		if k > first && (l.After(hi) || h.Before(lo)) {
			prev := releases[k-1]
			// Where either call took longer than half an interval (a
			// loaded machine), the two releases' order is not known from
			// outside the store: start a fresh line rather than judge.
			vague := r.Decided.Sub(r.Called) > interval/2 || prev.Decided.Sub(prev.Called) > interval/2
			if !vague && r.Called.Add(r.Delay-time.Microsecond).Before(at(prev).Add(interval)) {
				return restarts, 0, fmt.Errorf("release %d is off the %v grid of the %d before it, and less than %v after the last: no t0 fits every call", k, interval, k-first, interval)
			}
			first, restarts = k, restarts+1
			l, h = r.Called.Add(r.Delay-time.Microsecond), r.Decided.Add(r.Delay)
		}
		if k == first || l.After(lo) {
			lo = l
		}
		if k == first || h.Before(hi) {
			hi = h
		}
	}
	return restarts, hi.Sub(lo), nil
}
