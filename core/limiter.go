package core

import (
	"context"
	"fmt"
	"math"
)

// Limiter applies one algorithm and one limit to many keys through a
// [Store]. It is the type most code holds: the store decides where state
// lives (memory, Redis), the limiter what is asked of it.
//
// Make one with [NewLimiter]; the zero Limiter is not usable. A Limiter is
// safe for concurrent use. It keeps no state of its own, so
// several limiters may share a store; they share a key's state only when
// they use the same algorithm for the same key.
type Limiter struct {
	store Store
	alg   Algorithm
	limit Limit
	from  LimitSource // the limit at each call, if the limiter follows one (Following)
	queue int64       // each key's queue bound for reservations; 0: none (WithQueue)
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
	if !limit.inf {
		if err := alg.Validate(limit); err != nil {
			return nil, err
		}
	}
	return &Limiter{store: store, alg: alg, limit: limit}, nil
}

// Limit returns the limiter's limit: for a limiter that follows a
// [LimitSource], the source's now.
func (l *Limiter) Limit() Limit {
	if l.from == nil {
		return l.limit
	}
	return l.from.Limit()
}

// Following returns a limiter like l that decides each call under src's
// limit at that moment instead of its own: a limit that adapts, read
// with no decorator in the way. A limit src gives that the algorithm
// cannot decide under fails that call with the store's validation error.
// It fails with an error wrapping [ErrInvalidLimit] for a nil src.
func (l *Limiter) Following(src LimitSource) (*Limiter, error) {
	if src == nil {
		return nil, fmt.Errorf("%w: a nil limit source", ErrInvalidLimit)
	}
	f := *l
	f.from = src
	return &f, nil
}

// Algorithm returns the limiter's algorithm.
func (l *Limiter) Algorithm() Algorithm { return l.alg }

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
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (Decision, error) {
	if l.from != nil {
		return l.store.Apply(ctx, Request{Key: key, Algorithm: l.alg, Limit: l.from.Limit(), Cost: n})
	}
	// Two calls rather than one request whose limit is chosen first:
	// that cost a fixed limit's decision 5 to 8 ns on memstore
	// (stores/memstore's BenchmarkAllow), this nothing measurable.
	return l.store.Apply(ctx, Request{Key: key, Algorithm: l.alg, Limit: l.limit, Cost: n})
}

// Peek reports the decision Allow would return now, without charging the
// key or changing its state.
func (l *Limiter) Peek(ctx context.Context, key string) (Decision, error) {
	return l.store.Apply(ctx, Request{Key: key, Algorithm: l.alg, Limit: l.Limit(), Cost: 1, Op: OpPeek})
}

// Reset forgets key's state under the limiter's algorithm, as if it had
// never been charged.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	return l.store.Reset(ctx, key, l.alg)
}

// Unlimited returns the decision for a request under [Inf]: allowed, with
// no limit in sight. Stores answer Inf requests with it without touching
// any state.
func Unlimited() Decision {
	return Decision{Allowed: true, Limit: math.MaxInt64, Remaining: math.MaxInt64}
}
