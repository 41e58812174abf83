package core

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// Errors of Wait and Reserve.
var (
	// ErrUnsatisfiable reports a wait for a cost above the limit's
	// capacity: it would never end.
	ErrUnsatisfiable = errors.New("sluice: cost exceeds the limit's capacity")
	// ErrWaitTooLong reports a wait that could not end before the
	// context's deadline. Nothing was charged.
	ErrWaitTooLong = errors.New("sluice: wait would outlast the context's deadline")
)

// Reservation is capacity charged ahead of its use by [Limiter.Reserve]
// or [Stack.ReserveN]: the caller may act once [Reservation.Delay] has
// passed since the reservation was made, or give the capacity back with
// [Reservation.Cancel]. It is safe for concurrent use.
type Reservation struct {
	// Verdict is the store's answer. Allowed reports whether the capacity
	// was reserved (under every rule, for a stack); when it was not,
	// RetryAfter says when the same cost would be admitted at once.
	Verdict
	store   Store
	refunds []Request // what was charged, as refunds

	mu        sync.Mutex // held across the refund, so concurrent Cancels agree
	cancelled bool
}

// OK reports whether the capacity was reserved.
func (r *Reservation) OK() bool { return r.Allowed }

// Cancel gives the reserved capacity back, to every rule, for a caller
// that gave up or whose work failed before it started; calls after the
// first, and on a reservation that was not OK, do nothing. Cancelling
// after acting returns capacity that was used: the limit is then exceeded
// by the reservation's cost. The refund is one store call; it is made even
// if ctx is already done (with ctx's values, without its cancellation).
func (r *Reservation) Cancel(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.Allowed || r.cancelled {
		return nil
	}
	if _, err := apply(context.WithoutCancel(ctx), r.store, r.refunds); err != nil {
		return fmt.Errorf("sluice: cancel reservation: %w", err) // nothing was given back: a retry may
	}
	r.cancelled = true
	return nil
}

// reserve makes the reservations reqs on store, all or none.
func reserve(ctx context.Context, store Store, reqs []Request) (*Reservation, error) {
	v, err := apply(ctx, store, reqs)
	if err != nil {
		return nil, err
	}
	return &Reservation{Verdict: v, store: store, refunds: asRefunds(reqs)}, nil
}

// asRefunds turns reqs into the refunds that undo them, in place.
func asRefunds(reqs []Request) []Request {
	for i := range reqs {
		reqs[i].Op, reqs[i].MaxWait = OpRefund, 0
	}
	return reqs
}

// Reserve is shorthand for ReserveN(ctx, key, 1, maxWait).
func (l *Limiter) Reserve(ctx context.Context, key string, maxWait time.Duration) (*Reservation, error) {
	return l.ReserveN(ctx, key, 1, maxWait)
}

// ReserveN charges cost n to key now if the limit admits it within maxWait,
// letting the key go into debt, and returns the reservation: the caller
// must wait its Delay before acting. A reservation that would need longer
// is not made (OK is false) and charges nothing. This is one atomic store
// call, in Redis as in memory, so reservations from a whole fleet queue up
// in one order. The limiter's algorithm must reserve ([Reserver], such as
// the token bucket); otherwise ReserveN fails with [ErrUnsupported].
func (l *Limiter) ReserveN(ctx context.Context, key string, n int64, maxWait time.Duration) (*Reservation, error) {
	if maxWait <= 0 {
		return nil, fmt.Errorf("%w: maxWait %v is not positive", ErrInvalidRequest, maxWait)
	}
	return reserve(ctx, l.store, []Request{{Key: key, Algorithm: l.alg, Limit: l.limit, Cost: n, Op: OpReserve, MaxWait: maxWait}})
}

// Wait is shorthand for WaitN(ctx, key, 1).
func (l *Limiter) Wait(ctx context.Context, key string) (Decision, error) {
	return l.WaitN(ctx, key, 1)
}

// WaitN blocks until cost n may be spent for key, then returns the
// decision. It makes one store call: a reservation (see [Limiter.ReserveN])
// for as long as ctx allows, then sleeps the reservation's delay. It fails
// at once, charging nothing, with [ErrUnsatisfiable] when n exceeds the
// limit's capacity and with [ErrWaitTooLong] when the delay would outlast
// ctx's deadline; and it fails with ctx's error, giving the capacity back,
// when ctx is done while it sleeps. Without a deadline it waits as long as
// the key's debt needs.
func (l *Limiter) WaitN(ctx context.Context, key string, n int64) (Decision, error) {
	if l.limit.inf {
		if err := ctx.Err(); err != nil {
			return Decision{}, err
		}
		return Unlimited(), nil
	}
	v, err := wait(ctx, n, func(maxWait time.Duration) (*Reservation, error) {
		return l.ReserveN(ctx, key, n, maxWait)
	})
	return v.Decision, err
}

// wait reserves cost n for as long as ctx allows, through reserve, and
// sleeps the reservation's delay, cancelling it if ctx ends first.
func wait(ctx context.Context, n int64, reserve func(maxWait time.Duration) (*Reservation, error)) (Verdict, error) {
	if err := ctx.Err(); err != nil {
		return Verdict{}, err
	}
	maxWait := time.Duration(math.MaxInt64)
	if deadline, ok := ctx.Deadline(); ok {
		if maxWait = time.Until(deadline); maxWait <= 0 {
			return Verdict{}, context.DeadlineExceeded
		}
	}
	r, err := reserve(maxWait)
	switch {
	case err != nil:
		return Verdict{}, err
	case r.Unsatisfiable():
		return r.Verdict, fmt.Errorf("%w: cost %d, limit %d", ErrUnsatisfiable, n, r.Limit)
	case !r.Allowed:
		return r.Verdict, fmt.Errorf("%w: cost %d needs %v more", ErrWaitTooLong, n, r.RetryAfter)
	case r.Delay == 0:
		return r.Verdict, nil
	}
	t := time.NewTimer(r.Delay)
	defer t.Stop()
	select {
	case <-t.C:
		return r.Verdict, nil
	case <-ctx.Done():
		if err := r.Cancel(ctx); err != nil {
			return Verdict{}, errors.Join(ctx.Err(), err)
		}
		return Verdict{}, ctx.Err()
	}
}
