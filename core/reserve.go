package core

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// Errors of [Limiter.Wait] and [Limiter.Reserve].
var (
	// ErrUnsatisfiable reports a wait for a cost above the limit's
	// capacity: it would never end.
	ErrUnsatisfiable = errors.New("sluice: cost exceeds the limit's capacity")
	// ErrWaitTooLong reports a wait that could not end before the
	// context's deadline. Nothing was charged.
	ErrWaitTooLong = errors.New("sluice: wait would outlast the context's deadline")
)

// Reservation is capacity charged to a key ahead of its use by
// [Limiter.Reserve]: the caller may act once [Reservation.Delay] has passed
// since the reservation was made, or give the capacity back with
// [Reservation.Cancel]. It is safe for concurrent use.
type Reservation struct {
	// Decision is the store's answer. Allowed reports whether the
	// capacity was reserved; when it was not, RetryAfter says when the
	// same cost would be admitted at once.
	Decision
	lim  *Limiter
	key  string
	cost int64

	mu        sync.Mutex // held across the refund, so concurrent Cancels agree
	cancelled bool
}

// OK reports whether the capacity was reserved.
func (r *Reservation) OK() bool { return r.Allowed }

// Cancel gives the reserved capacity back to the key, for a caller that
// gave up or whose work failed before it started; calls after the first,
// and on a reservation that was not OK, do nothing. Cancelling after acting
// returns capacity that was used: the limit is then exceeded by the
// reservation's cost. The refund is a store call; it is made even if ctx
// is already done (but with ctx's values and without its cancellation).
func (r *Reservation) Cancel(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.Allowed || r.cancelled {
		return nil
	}
	_, err := r.lim.store.Apply(context.WithoutCancel(ctx), Request{Key: r.key, Algorithm: r.lim.alg, Limit: r.lim.limit, Cost: r.cost, Refund: true})
	if err != nil {
		return fmt.Errorf("sluice: cancel reservation: %w", err) // nothing was given back: a retry may
	}
	r.cancelled = true
	return nil
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
	d, err := l.store.Apply(ctx, Request{Key: key, Algorithm: l.alg, Limit: l.limit, Cost: n, MaxWait: maxWait})
	if err != nil {
		return nil, err
	}
	return &Reservation{Decision: d, lim: l, key: key, cost: n}, nil
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
	if err := ctx.Err(); err != nil {
		return Decision{}, err
	}
	if l.limit.inf {
		return Unlimited(), nil
	}
	maxWait := time.Duration(math.MaxInt64)
	if deadline, ok := ctx.Deadline(); ok {
		if maxWait = time.Until(deadline); maxWait <= 0 {
			return Decision{}, context.DeadlineExceeded
		}
	}
	r, err := l.ReserveN(ctx, key, n, maxWait)
	switch {
	case err != nil:
		return Decision{}, err
	case r.Unsatisfiable():
		return r.Decision, fmt.Errorf("%w: cost %d, %v", ErrUnsatisfiable, n, l.limit)
	case !r.Allowed:
		return r.Decision, fmt.Errorf("%w: cost %d needs %v more", ErrWaitTooLong, n, r.RetryAfter)
	case r.Delay == 0:
		return r.Decision, nil
	}
	t := time.NewTimer(r.Delay)
	defer t.Stop()
	select {
	case <-t.C:
		return r.Decision, nil
	case <-ctx.Done():
		if err := r.Cancel(ctx); err != nil {
			return Decision{}, errors.Join(ctx.Err(), err)
		}
		return Decision{}, ctx.Err()
	}
}
