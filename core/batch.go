package core

import (
	"context"
	"errors"
	"fmt"
)

// ValidateAll checks requests to be decided together ([Store.ApplyAll]):
// there is at least one, each is valid, all share one [Op], no two name
// the same key and algorithm, and out is as long as reqs. Its errors name
// the request at fault by its index.
func ValidateAll(reqs []Request, out []Decision) error {
	switch {
	case len(reqs) == 0:
		return fmt.Errorf("%w: no requests", ErrInvalidRequest)
	case len(out) != len(reqs):
		return fmt.Errorf("%w: %d decisions for %d requests", ErrInvalidRequest, len(out), len(reqs))
	}
	for i := range reqs {
		r := &reqs[i]
		if err := r.Validate(); err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
		if r.Op != reqs[0].Op {
			return fmt.Errorf("%w: request %d is a %v, request 0 a %v: a batch has one operation", ErrInvalidRequest, i, r.Op, reqs[0].Op)
		}
		for j := range i {
			if reqs[j].Key == r.Key && reqs[j].Algorithm.Name() == r.Algorithm.Name() {
				return fmt.Errorf("%w: requests %d and %d name the same key and algorithm", ErrInvalidRequest, j, i)
			}
		}
	}
	return nil
}

// ApplyInTurn is [Store.ApplyAll] for a store that cannot decide several
// requests in one atomic step; such a store calls it by name from its
// ApplyAll. The requests must have passed [ValidateAll].
//
// Peeks are made in turn. Refunds are made in turn, each whatever the
// others' fate. Charges and reservations are made in order and, at the
// first denial, the ones made are refunded and the rest peeked at, so
// that out is complete; a failure part way also refunds what was charged,
// as far as the store lets it. Until the refunds land, other callers see
// those charges: a request may be denied that a moment later would pass.
// Each refund is made at once, in the same call, so the window is a few
// store round trips.
//
// Two undoings are inexact. Under a window algorithm a charge refunded
// moves the key's last-charged window to the refund's, so a later refund
// of an earlier charge may give back nothing. And a batch that renews a
// concurrency lease and is then denied by a later request releases that
// lease: the refund of a renewal is a release. Stores that decide a batch
// atomically have neither problem.
func ApplyInTurn(ctx context.Context, s Store, reqs []Request, out []Decision) error {
	switch reqs[0].Op {
	case OpPeek:
		for i := range reqs {
			d, err := s.Apply(ctx, reqs[i])
			if err != nil {
				return fmt.Errorf("request %d: %w", i, err)
			}
			out[i] = d
		}
		return nil
	case OpRefund:
		var errs []error
		for i := range reqs {
			d, err := s.Apply(context.WithoutCancel(ctx), reqs[i])
			if err != nil {
				errs = append(errs, fmt.Errorf("refund of request %d: %w", i, err))
			}
			out[i] = d
		}
		return errors.Join(errs...)
	}
	refund := func(n int) error {
		var errs []error
		for j := n - 1; j >= 0; j-- {
			r := reqs[j]
			r.Op, r.MaxWait = OpRefund, 0
			if _, err := s.Apply(context.WithoutCancel(ctx), r); err != nil {
				errs = append(errs, fmt.Errorf("refund of request %d: %w", j, err))
			}
		}
		return errors.Join(errs...)
	}
	for i := range reqs {
		d, err := s.Apply(ctx, reqs[i])
		if err != nil {
			err = fmt.Errorf("request %d: %w", i, err)
			if rerr := refund(i); rerr != nil {
				return errors.Join(err, rerr)
			}
			return err
		}
		out[i] = d
		if d.Allowed {
			continue
		}
		if err := refund(i); err != nil {
			return err
		}
		for j := i + 1; j < len(reqs); j++ {
			r := reqs[j]
			r.Op, r.MaxWait = OpPeek, 0
			if out[j], err = s.Apply(ctx, r); err != nil {
				return fmt.Errorf("request %d: %w", j, err)
			}
		}
		return nil
	}
	return nil
}

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
