package sluice

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core"
)

// Errors of Wait and Reserve.
var (
	// ErrUnsatisfiable reports a wait for a cost above the limit's
	// capacity: it would never end.
	ErrUnsatisfiable = errors.New("sluice: cost exceeds the limit's capacity")
	// ErrWaitTooLong reports a wait that could not end before the
	// context's deadline. Nothing was charged.
	ErrWaitTooLong = errors.New("sluice: wait would outlast the context's deadline")
	// ErrQueueFull reports a wait refused because the key's queue was
	// full (see [Limiter.WithQueue]): it could have ended before the
	// context's deadline, but as many as the queue holds were waiting
	// already. Nothing was charged.
	ErrQueueFull = errors.New("sluice: queue full")
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
	refunds []core.Request // what was charged, as refunds

	mu        sync.Mutex // held across the refund, so concurrent Cancels agree
	cancelled bool
}

// OK reports whether the capacity was reserved.
func (r *Reservation) OK() bool { return r.Allowed }

// Cancel gives the reserved capacity back, to every rule, for a caller
// that gave up or whose work failed before it started; calls after the
// first that succeeded, and on a reservation that was not OK, do
// nothing. In a queue ([Limiter.WithQueue]) the freed place goes to the
// next reservation made. Cancelling after acting returns capacity that
// was used: the limit is then exceeded by the reservation's cost.
//
// The refund is one store call, made with ctx's values but not its
// cancellation (it is made even if ctx is done) and bounded by
// [CleanupTimeout]. If it fails, Cancel returns an error wrapping
// [ErrCleanup] and the store's error; a later Cancel tries again, which
// after a timeout may give the capacity back twice.
func (r *Reservation) Cancel(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.Allowed || r.cancelled {
		return nil
	}
	if err := refund(ctx, r.store, r.refunds, "cancel reservation"); err != nil {
		return err
	}
	r.cancelled = true
	return nil
}

// reserve makes the reservations reqs on store, all or none.
func reserve(ctx context.Context, store Store, reqs []core.Request) (*Reservation, error) {
	v, err := apply(ctx, store, reqs)
	if err != nil {
		return nil, err
	}
	return &Reservation{Verdict: v, store: store, refunds: asRefunds(reqs)}, nil
}

// asRefunds turns reqs into the refunds that undo them, in place.
func asRefunds(reqs []core.Request) []core.Request {
	for i := range reqs {
		reqs[i] = reqs[i].As(core.OpRefund)
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
// is not made (OK is false) and charges nothing; so is one that would
// find the key's queue full, for a limiter made by [Limiter.WithQueue].
// This is one atomic store call, in Redis as in memory, so reservations
// from a whole fleet queue up in one order. The limiter's algorithm must
// reserve ([core.Reserver], such as the token bucket and GCRA); otherwise
// ReserveN fails with [ErrUnsupported].
func (l *Limiter) ReserveN(ctx context.Context, key string, n int64, maxWait time.Duration) (*Reservation, error) {
	req, err := l.request(key, n, core.OpReserve)
	if err != nil {
		return nil, err
	}
	req = req.Clone()
	req.MaxWait, req.MaxQueue = maxWait, l.queue
	return reserve(ctx, l.store, []core.Request{req})
}

// Wait is shorthand for WaitN(ctx, key, 1).
func (l *Limiter) Wait(ctx context.Context, key string) (Decision, error) {
	return l.WaitN(ctx, key, 1)
}

// WaitN blocks until cost n may be spent for key, then returns the
// decision. It makes one store call: a reservation (see [Limiter.ReserveN])
// for as long as ctx allows, then sleeps the reservation's delay. It fails
// at once, charging nothing, with [ErrUnsatisfiable] when n exceeds the
// limit's capacity, with [ErrWaitTooLong] when the delay would outlast
// ctx's deadline, with [ErrQueueFull] when the key's queue is full
// ([Limiter.WithQueue]), and with [ErrUnavailable] when the store failed
// and a failure policy denied ([SourceFailClosed]); the returned decision
// then says when the same cost would pass at once (RetryAfter), and its
// Source what answered, which the error names when it was not the store.
// It returns an admission only while ctx lives: when ctx is done, or
// its deadline has passed, by the time the delay has (a slot the store
// counted from its own later instant may fall past the deadline by the
// call's latency), it gives the capacity back (see [Reservation.Cancel])
// and fails with ctx's error, joined with an error wrapping [ErrCleanup]
// if the refund could not be confirmed within [CleanupTimeout]. Without
// a deadline it waits as long as the key's debt needs. A limiter fixed
// at an instant ([Limiter.At]) cannot wait: WaitN fails with
// [ErrInvalidRequest].
func (l *Limiter) WaitN(ctx context.Context, key string, n int64) (Decision, error) {
	if l.x != nil && l.x.fixed {
		return Decision{}, errWaitAt
	}
	if l.Limit().IsInf() {
		// No store is asked: the limiter answers, so it validates.
		req, err := l.request(key, n, core.OpCharge)
		if err == nil {
			err = cmp.Or(req.Validate(), ctx.Err())
		}
		if err != nil {
			return Decision{}, err
		}
		return req.Answer(core.Unlimited()), nil
	}
	v, err := wait(ctx, n, l.queue > 0, func(maxWait time.Duration) (*Reservation, error) {
		return l.ReserveN(ctx, key, n, maxWait)
	})
	return v.Decision, err
}

// WithQueue returns a limiter like l whose reservations (Reserve,
// ReserveN, Wait, WaitN) each key queues at most n units of cost for: a
// reservation is admitted only if, after it, the key owes at most n
// tokens, which with costs of 1 is at most n callers waiting, this one
// included (see [core.Terms.MaxQueue]). The n+1-th is refused at once, its
// Wait failing with [ErrQueueFull]; a waiter that gives up is refunded,
// and its place goes to the next caller. The queue is the key's debt in
// the store, so the bound holds across every process sharing it. Use it
// with a burst of 1 to shape traffic: requests leave one at a time, at
// the limit's rate, as from a leaky bucket (docs/shaping.md).
//
// It fails with an error wrapping [ErrInvalidRequest] if n is not 1 to
// [core.MaxUnits], and with [ErrUnsupported] if the limiter's algorithm cannot
// reserve.
func (l *Limiter) WithQueue(n int64) (*Limiter, error) {
	if err := checkQueue(n); err != nil {
		return nil, err
	}
	if !l.Limit().IsInf() && !core.Reserves(l.terms.Algorithm) {
		return nil, fmt.Errorf("%w: algorithm %q cannot reserve, so it cannot queue", ErrUnsupported, l.terms.Algorithm.Name())
	}
	q := *l
	q.queue = n
	return &q, nil
}

// Queue returns the limiter's queue bound ([Limiter.WithQueue]); 0 if it
// has none.
func (l *Limiter) Queue() int64 { return l.queue }

// errWaitAt is the error of a Wait at a fixed instant.
var errWaitAt = fmt.Errorf("%w: a wait at a fixed instant (At): Wait sleeps on the real clock; reserve with ReserveN and act after its Delay", ErrInvalidRequest)

// checkQueue reports a queue bound WithQueue cannot use.
func checkQueue(n int64) error {
	if n <= 0 || n > core.MaxUnits {
		return fmt.Errorf("%w: a queue of %d; want 1 to 2^52", ErrInvalidRequest, n)
	}
	return nil
}

// answeredBy names, for an error, what answered a denial other than the
// store (a local fallback while the store is down, a cached denial, a
// deny list); "" for the store.
func answeredBy(s Source) string {
	switch s {
	case SourceStore:
		return ""
	case SourceDegraded:
		return " (answered by the local fallback while the store is down: degraded)"
	}
	return " (answered by " + s.String() + ")"
}

// wait reserves cost n for as long as ctx allows, through reserve, and
// sleeps the reservation's delay, cancelling it if ctx ends first. queued
// says whether the reservation is bounded by a queue, so that a denial
// within the deadline is told apart as [ErrQueueFull].
func wait(ctx context.Context, n int64, queued bool, reserve func(maxWait time.Duration) (*Reservation, error)) (Verdict, error) {
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
	case !r.Allowed && r.Source == SourceFailClosed:
		// The store failed and the failure policy denied: neither the
		// deadline nor the queue had a say.
		return r.Verdict, fmt.Errorf("%w: the failure policy answered %v for cost %d; it tries the store again in %v", ErrUnavailable, r.Source, n, r.RetryAfter)
	case r.Unsatisfiable():
		return r.Verdict, fmt.Errorf("%w: cost %d, limit %d%s", ErrUnsatisfiable, n, r.Limit, answeredBy(r.Source))
	case !r.Allowed && queued && r.RetryAfter <= maxWait.Truncate(time.Microsecond):
		// Within the deadline (a store bounds the debt by MaxWait in
		// whole µs): the queue refused it.
		return r.Verdict, fmt.Errorf("%w: cost %d would pass in %v%s", ErrQueueFull, n, r.RetryAfter, answeredBy(r.Source))
	case !r.Allowed:
		return r.Verdict, fmt.Errorf("%w: cost %d needs %v more%s", ErrWaitTooLong, n, r.RetryAfter, answeredBy(r.Source))
	case r.Delay > 0:
		t := time.NewTimer(r.Delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	// Admitted only while ctx lives. A caller whose context ended, or
	// whose deadline passed, while it slept or while its process did not
	// run, cannot act in time, and its capacity goes back: the store
	// counted maxWait from the instant it decided, later than it was
	// measured here, so a slot may fall past the deadline by the call's
	// latency.
	if ended(ctx) {
		err := cmp.Or(ctx.Err(), context.DeadlineExceeded)
		if cerr := r.Cancel(ctx); cerr != nil {
			err = errors.Join(err, cerr)
		}
		return Verdict{}, err
	}
	return r.Verdict, nil
}
