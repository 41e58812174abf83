package stores

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/sluicehq/sluice/core"
)

// ValidateAll checks requests to be decided together ([core.Store]'s ApplyAll):
// there is at least one, each is valid, all share one [core.Op], no two name
// the same key and algorithm, and out is as long as reqs. Its errors name
// the request at fault by its index.
func ValidateAll(reqs []core.Request, out []core.Decision) error {
	switch {
	case len(reqs) == 0:
		return fmt.Errorf("%w: no requests", core.ErrInvalidRequest)
	case len(out) != len(reqs):
		return fmt.Errorf("%w: %d decisions for %d requests", core.ErrInvalidRequest, len(out), len(reqs))
	}
	for i := range reqs {
		r := &reqs[i]
		if err := r.Validate(); err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
		if r.Op != reqs[0].Op {
			return fmt.Errorf("%w: request %d is a %v, request 0 a %v: a batch has one operation", core.ErrInvalidRequest, i, r.Op, reqs[0].Op)
		}
		for j := range i {
			if reqs[j].Key == r.Key && reqs[j].Algorithm.Name() == r.Algorithm.Name() {
				return fmt.Errorf("%w: requests %d and %d name the same key and algorithm", core.ErrInvalidRequest, j, i)
			}
		}
	}
	return nil
}

// ApplyInTurn is [core.Store]'s ApplyAll for a store that cannot decide several
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
// Refunds, asked for or undoing a batch, are made with ctx's values but
// not its cancellation, since a refund is often made because the caller
// gave up, and all of a call's refunds within [core.CleanupTimeout], so
// that a store that hangs cannot hold the call longer. An undo that
// fails is reported wrapping [core.ErrCleanup]: the charges it was to
// give back may still be held, until the keys' state recovers.
//
// A batch of partial admissions ([core.OpAtMost]) is probed in turn, each
// request a peek of cost 0, which finds the least cost every request
// admits ([core.RunAll]), then charged as a batch of charges of that cost;
// each admitted decision's Admitted is that cost. Another caller's charge
// between the probes and the charges may deny the batch where a smaller
// cost would have passed; no request is ever charged more than it admits.
//
// Two undoings are inexact. Under a window algorithm a charge refunded
// moves the key's last-charged window to the refund's, so a later refund
// of an earlier charge may give back nothing. And a batch that renews a
// concurrency lease and is then denied by a later request releases that
// lease: the refund of a renewal is a release. Stores that decide a batch
// atomically have neither problem.
func ApplyInTurn(ctx context.Context, s core.Store, reqs []core.Request, out []core.Decision) error {
	switch reqs[0].Op {
	case core.OpPeek:
		for i := range reqs {
			d, err := s.Apply(ctx, reqs[i])
			if err != nil {
				return fmt.Errorf("request %d: %w", i, err)
			}
			out[i] = d
		}
		return nil
	case core.OpRefund:
		ctx, cancel := cleanupContext(ctx)
		defer cancel()
		var errs []error
		for i := range reqs {
			d, err := s.Apply(ctx, reqs[i])
			if err != nil {
				errs = append(errs, fmt.Errorf("refund of request %d: %w", i, err))
			}
			out[i] = d
		}
		return errors.Join(errs...)
	case core.OpAtMost:
		return atMostInTurn(ctx, s, reqs, out)
	}
	return chargeInTurn(ctx, s, reqs, out)
}

// atMostInTurn decides a batch of partial admissions for ApplyInTurn: it
// probes every request, then charges every one the least cost they all
// admit.
func atMostInTurn(ctx context.Context, s core.Store, reqs []core.Request, out []core.Decision) error {
	fits := int64(math.MaxInt64)
	for i := range reqs {
		if reqs[i].Limit.IsInf() {
			continue
		}
		probe := reqs[i]
		probe.Op, probe.Cost = core.OpPeek, 0
		d, err := s.Apply(ctx, probe)
		if err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
		fits = min(fits, reqs[i].Cost, d.Remaining)
	}
	take := max(fits, 1)
	charges := make([]core.Request, len(reqs))
	for i, r := range reqs {
		if !r.Limit.IsInf() {
			r.Cost = take
		}
		r.Op = core.OpCharge
		charges[i] = r
	}
	if err := chargeInTurn(ctx, s, charges, out); err != nil {
		return err
	}
	for i := range out {
		if out[i].Allowed {
			out[i].Admitted = charges[i].Cost
		}
	}
	return nil
}

// chargeInTurn decides a batch of charges or reservations for
// ApplyInTurn: in order, refunding those made at the first denial.
func chargeInTurn(ctx context.Context, s core.Store, reqs []core.Request, out []core.Decision) error {
	refund := func(n int) error {
		if n == 0 {
			return nil
		}
		ctx, cancel := cleanupContext(ctx)
		defer cancel()
		var errs []error
		for j := n - 1; j >= 0; j-- {
			if _, err := s.Apply(ctx, reqs[j].As(core.OpRefund)); err != nil {
				errs = append(errs, fmt.Errorf("refund of request %d: %w", j, err))
			}
		}
		if len(errs) > 0 {
			return fmt.Errorf("%w: undoing a batch decided in turn: %w", core.ErrCleanup, errors.Join(errs...))
		}
		return nil
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
			if out[j], err = s.Apply(ctx, reqs[j].As(core.OpPeek)); err != nil {
				return fmt.Errorf("request %d: %w", j, err)
			}
		}
		return nil
	}
	return nil
}

// cleanupContext returns the context of the refunds ApplyInTurn makes:
// ctx's values, without its cancellation, ending after
// [core.CleanupTimeout].
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), core.CleanupTimeout)
}

// Func adapts a function to a [core.Store], as [net/http.HandlerFunc] does
// for handlers. It suits tests and small decorators. It validates every
// request before it calls the function, as a store does (the function
// sees only valid requests); its ApplyAll decides in turn
// ([ApplyInTurn]), its Reset fails with [core.ErrUnsupported], and its
// Close does nothing.
type Func func(ctx context.Context, req core.Request) (core.Decision, error)

// Apply validates req and calls f(ctx, req).
func (f Func) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	if err := req.Validate(); err != nil {
		return core.Decision{}, err
	}
	return f(ctx, req)
}

// ApplyAll decides reqs in turn through f (see [ApplyInTurn]).
func (f Func) ApplyAll(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	if err := ValidateAll(reqs, out); err != nil {
		return err
	}
	return ApplyInTurn(ctx, validated{f}, reqs, out)
}

// validated is a Func whose requests were validated already: a batch's,
// by ValidateAll.
type validated struct{ Func }

// Apply calls the function, without validating req again.
func (v validated) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	return v.Func(ctx, req)
}

// Reset fails with [ErrUnsupported]: a function has no state to forget.
func (f Func) Reset(context.Context, string, core.Algorithm) error {
	return fmt.Errorf("%w: a stores.Func has no Reset", core.ErrUnsupported)
}

// Close does nothing.
func (f Func) Close() error { return nil }

// ValidateReset checks the arguments of [core.Store]'s Reset: a valid key
// ([core.ValidateKey]) and an algorithm ([core.ErrNoAlgorithm] if nil).
func ValidateReset(key string, alg core.Algorithm) error {
	if err := core.ValidateKey(key); err != nil {
		return err
	}
	if alg == nil {
		return core.ErrNoAlgorithm
	}
	return nil
}
