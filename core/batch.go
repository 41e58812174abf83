package core

import (
	"context"
)

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

// Verdict is the answer to several requests decided together: the
// binding rule's decision, and each rule's own. A [Stack] answers with
// one; a [Reservation] and a [Lease] carry one.
type Verdict struct {
	// Decision is the binding rule's decision, with Allowed true only if
	// every rule admitted the request, and, for an admitted reservation,
	// a Delay of the longest any rule needs.
	Decision
	// Binding is the index of the binding rule (see [Binding]).
	Binding int
	// Rules holds each rule's decision, in order. After a denial, the
	// rules that admitted report what they would have left.
	Rules []Decision
}

// verdict sums up rules' decisions.
func verdict(rules []Decision) Verdict {
	v := Verdict{Binding: Binding(rules), Rules: rules}
	v.Decision = rules[v.Binding]
	v.Allowed = true
	for _, d := range rules {
		v.Allowed = v.Allowed && d.Allowed
	}
	if v.Allowed {
		for _, d := range rules {
			v.Delay = max(v.Delay, d.Delay)
		}
	}
	return v
}

// apply decides reqs on store: one request with Apply, several with
// ApplyAll.
func apply(ctx context.Context, store Store, reqs []Request) (Verdict, error) {
	if len(reqs) == 1 {
		return applyOne(ctx, store, reqs[0])
	}
	out := make([]Decision, len(reqs))
	if err := store.ApplyAll(ctx, reqs, out); err != nil {
		return Verdict{}, err
	}
	return verdict(out), nil
}

// applyOne decides one request with Apply.
func applyOne(ctx context.Context, store Store, req Request) (Verdict, error) {
	d, err := store.Apply(ctx, req)
	if err != nil {
		return Verdict{}, err
	}
	return Verdict{Decision: d, Rules: []Decision{d}}, nil
}
