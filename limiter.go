package sluice

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core"
)

// Limiter applies one algorithm and one limit to many keys through a
// [Store]. It is the type most code holds: the store decides where state
// lives (memory, Redis), the limiter what is asked of it.
//
// Make one with [NewLimiter]; the zero Limiter is not usable. A Limiter is
// safe for concurrent use. It keeps no state of its own, so
// several limiters may share a store; they share a key's state only when
// they use the same algorithm for the same key.
//
// A limiter decides on its store's clock (the Redis server's, for the
// Redis stores); [Limiter.At] returns one that decides at an instant of
// your own, for tests, replays and simulations.
type Limiter struct {
	store Store
	terms *core.Terms // what every request carries: the algorithm, the limit and, for At, the instant
	queue int64       // each key's queue bound for reservations; 0: none (WithQueue)
	x     *extra      // what Following and At add; nil for a limiter NewLimiter made
}

// extra is what [Limiter.Following] and [Limiter.At] add to a limiter,
// apart, so that a plain limiter's decision checks one pointer.
type extra struct {
	from  LimitSource                 // the limit at each call, if the limiter follows one (Following)
	last  *atomic.Pointer[core.Terms] // the terms under from's latest limit
	fixed bool                        // terms.Now is the instant to decide at (At)
}

// LimitSource gives a limit that may change from one call to the next,
// such as an adaptive controller's (package adaptive). Its Limit is
// called on every decision of a limiter that follows it
// ([Limiter.Following]): it must be safe for concurrent use, cheap (an
// atomic load), and return a limit valid for the limiter's algorithm.
type LimitSource interface {
	Limit() Limit
}

// NewLimiter returns a limiter that decides with alg under limit, keeping
// state in store. It fails with an error wrapping [ErrNoStore],
// [ErrNoAlgorithm] or [ErrInvalidLimit] when one of them cannot be used.
func NewLimiter(store Store, alg Algorithm, limit Limit) (*Limiter, error) {
	switch {
	case store == nil:
		return nil, ErrNoStore
	case alg == nil:
		return nil, ErrNoAlgorithm
	}
	if err := limit.Validate(); err != nil {
		return nil, err
	}
	if !limit.IsInf() {
		if err := alg.Validate(limit); err != nil {
			return nil, err
		}
	}
	return &Limiter{store: store, terms: &core.Terms{Algorithm: alg, Limit: limit}}, nil
}

// Limit returns the limiter's limit: for a limiter that follows a
// [LimitSource], the source's now.
func (l *Limiter) Limit() Limit {
	if l.x == nil || l.x.from == nil {
		return l.terms.Limit
	}
	return l.x.from.Limit()
}

// Following returns a limiter like l that decides each call under src's
// limit at that moment instead of its own: a limit that adapts, read
// with no decorator in the way. A limit src gives that the algorithm
// cannot decide under fails that call with the store's validation error.
// A call allocates only when src's limit differs from the last call's.
// It fails with an error wrapping [ErrInvalidLimit] for a nil src.
func (l *Limiter) Following(src LimitSource) (*Limiter, error) {
	if src == nil {
		return nil, fmt.Errorf("%w: a nil limit source", ErrInvalidLimit)
	}
	f := *l
	f.x = l.extra()
	f.x.from = src
	return &f, nil
}

// At returns a limiter like l that decides every call at instant t
// instead of on its store's clock, as x/time/rate's AllowN(t, n),
// ReserveN(t, n) and TokensAt(t) do: lim.At(t).AllowN(ctx, key, n),
// lim.At(t).ReserveN(ctx, key, n, maxWait), lim.At(t).Level(ctx, key).
// Stores decide in whole microseconds, so t is rounded down to its
// microsecond; each decision's At reports the instant used, which is
// later than t when the key was last charged later (a state's clock
// never runs backwards). The returned limiter keeps l's limit (or the
// source it follows), algorithm, store and queue; l is unchanged.
//
// Every call of the returned limiter fails with an error wrapping
// [ErrInvalidTime] when t is before 1970, after 2112 or the zero Time
// (use l itself to decide on the store's clock). Wait and WaitN, which
// sleep on the real clock, fail with [ErrInvalidRequest]: reserve at the
// instant with ReserveN, and act after the reservation's Delay.
// Reservations and leases made at t are cancelled, released and renewed
// at t.
//
// At allocates the copy; a limiter on the store's clock decides, as
// before, without allocating.
func (l *Limiter) At(t time.Time) *Limiter {
	f := *l
	f.x = l.extra()
	f.x.fixed = true
	terms := *l.terms
	terms.Now = t
	f.terms = &terms
	return &f
}

// extra returns a copy of l's extra, to be changed for a new limiter,
// with terms of its own to build under its source's limits.
func (l *Limiter) extra() *extra {
	x := extra{last: new(atomic.Pointer[core.Terms])}
	if l.x != nil {
		x.from, x.fixed = l.x.from, l.x.fixed
	}
	return &x
}

// under returns terms like base's under limit: the terms last built, as
// long as the source's limit stays the same, so that a limiter following
// one allocates only when its limit changes.
func (x *extra) under(base *core.Terms, limit Limit) *core.Terms {
	if t := x.last.Load(); t != nil && t.Limit == limit {
		return t
	}
	t := *base
	t.Limit = limit
	x.last.Store(&t)
	return &t
}

// request returns l's request for key with cost n and operation op: under
// l's limit at this call, at l's instant if it has one.
func (l *Limiter) request(key string, n int64, op core.Op) (core.Request, error) {
	req := core.Request{Key: key, Cost: n, Op: op, Terms: l.terms}
	if x := l.x; x != nil {
		if x.fixed && l.terms.Now.IsZero() {
			return core.Request{}, errZeroInstant
		}
		if x.from != nil {
			req.Terms = x.under(l.terms, x.from.Limit())
		}
	}
	return req, nil
}

// errZeroInstant is the error of every call of a limiter or stack fixed
// at the zero Time.
var errZeroInstant = fmt.Errorf("%w: the zero time: At needs an instant; without At, a limiter decides on its store's clock", ErrInvalidTime)

// apply decides l's request for key with cost n and operation op.
func (l *Limiter) apply(ctx context.Context, key string, n int64, op core.Op) (Decision, error) {
	req, err := l.request(key, n, op)
	if err != nil {
		return Decision{}, err
	}
	return l.store.Apply(ctx, req)
}

// Algorithm returns the limiter's algorithm.
func (l *Limiter) Algorithm() Algorithm { return l.terms.Algorithm }

// Store returns the limiter's store.
func (l *Limiter) Store() Store { return l.store }

// Allow is shorthand for AllowN(ctx, key, 1).
func (l *Limiter) Allow(ctx context.Context, key string) (Decision, error) {
	return l.AllowN(ctx, key, 1)
}

// AllowN charges cost n to key if the limit admits it now, and reports the
// decision. A denial is a Decision with Allowed false and a nil error; an
// error means the request was invalid or the store failed, and nothing was
// charged that the store knows of.
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (d Decision, err error) {
	if l.x != nil {
		return l.apply(ctx, key, n, core.OpCharge)
	}
	// The decision is received where AllowN returns it: copied from a
	// variable of AllowN's, the copy would wait for the stores the call
	// had just made to it to reach the cache.
	d, err = l.store.Apply(ctx, core.Request{Key: key, Cost: n, Terms: l.terms})
	return d, err
}

// AllowAtMost charges key as much of cost n as the limit admits now, at
// least 1 and at most n, and reports how much in the decision's
// Admitted, as redis_rate's AllowAtMost does: the largest cost the
// algorithm admits, found and charged in one atomic store call (one
// script call on Redis). If not even 1 fits, the decision is a denial
// (Admitted 0) whose RetryAfter says when one will. It fails with an
// error wrapping [ErrInvalidCost] when n is below 1, and with
// [ErrUnsupported] for an algorithm that holds leases. Under [Inf] it
// admits all of n.
func (l *Limiter) AllowAtMost(ctx context.Context, key string, n int64) (Decision, error) {
	return l.apply(ctx, key, n, core.OpAtMost)
}

// Peek reports the decision Allow would return now, without charging the
// key or changing its state.
func (l *Limiter) Peek(ctx context.Context, key string) (Decision, error) {
	return l.apply(ctx, key, 1, core.OpPeek)
}

// Level reports key's level now without charging it or changing its
// state: the decision of a request of cost 0, whose Level is what the key
// holds, exactly and in fractions of a token (x/time/rate's Tokens, and
// with [Limiter.At], TokensAt), whose At is the instant it was read at,
// Remaining the whole tokens of it (never below 0), Limit the capacity
// and ResetAfter the time until the key is full. It is one store call.
// Level.Tokens() is the level as a float64; a bucket in debt after
// reservations has a level below zero.
func (l *Limiter) Level(ctx context.Context, key string) (Decision, error) {
	return l.apply(ctx, key, 0, core.OpPeek)
}

// Reset forgets key's state under the limiter's algorithm, as if it had
// never been charged.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	return l.store.Reset(ctx, key, l.terms.Algorithm)
}
