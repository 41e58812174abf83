package core

// Binding returns the index of the decision that binds a set of
// decisions made together: among denials, the one with the longest wait;
// if all were admitted, the one with the longest Delay (a reservation's)
// and, among equal delays, the one closest to exhaustion (least Remaining
// in proportion to its Limit; a decision that knows no Limit, such as a
// fail-open one, binds only when every one is like it). Ties go to the
// first. It returns 0 for an empty set.
func Binding(ds []Decision) int {
	best := 0
	for i := 1; i < len(ds); i++ {
		a, b := ds[i], ds[best]
		switch {
		case !a.Allowed && b.Allowed:
			best = i
		case !a.Allowed && !b.Allowed:
			if a.RetryAfter > b.RetryAfter {
				best = i
			}
		case a.Allowed && b.Allowed:
			if a.Delay > b.Delay || a.Delay == b.Delay && fraction(a) < fraction(b) {
				best = i
			}
		}
	}
	return best
}

// fraction is how much of its limit a decision has left, 0 to 1.
func fraction(d Decision) float64 {
	if d.Limit <= 0 {
		return 1
	}
	return float64(d.Remaining) / float64(d.Limit)
}
