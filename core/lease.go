package core

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
)

// Leaser is implemented by algorithms that hold leases ([Request.Lease]):
// the concurrency algorithm, which limits how many leases a key holds at
// once rather than a rate.
type Leaser interface {
	Algorithm
	// Leases reports whether the algorithm honours [Request.Lease].
	Leases() bool
}

// Lease is a share of a key's concurrency, acquired by [Limiter.Acquire]
// and held until [Lease.Release] or until the limit's Period passes since
// it was acquired or last renewed ([Lease.Renew]): a holder that crashes
// never keeps its slots for longer than that. A Lease is safe for
// concurrent use.
type Lease struct {
	// Decision is the store's answer to the acquisition: Allowed reports
	// whether the slots were acquired, Remaining how many are left.
	Decision
	lim  *Limiter
	key  string
	id   int64
	cost int64

	mu       sync.Mutex // held across a release, so concurrent calls agree
	released bool
}

// OK reports whether the lease was acquired.
func (l *Lease) OK() bool { return l.Allowed }

// ID returns the lease's identifier: a random number from 1 to 2^52, which
// is what the store keeps (see [Request.Lease]).
func (l *Lease) ID() int64 { return l.id }

// Release gives the lease's slots back. Calls after the first succeeding
// one, and on a lease that was not acquired, do nothing. It is a store
// call, made even if ctx is done (with ctx's values, without its
// cancellation).
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.Allowed || l.released {
		return nil
	}
	if _, err := l.lim.store.Apply(context.WithoutCancel(ctx), l.request(true)); err != nil {
		return fmt.Errorf("sluice: release lease: %w", err)
	}
	l.released = true
	return nil
}

// Renew extends the lease by the limit's Period from now, for work that
// runs longer than one. If the lease has expired meanwhile, Renew acquires
// it again if the key has room, and the decision says whether it did.
func (l *Lease) Renew(ctx context.Context) (Decision, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.Allowed || l.released {
		return Decision{}, fmt.Errorf("%w: renewing a lease that is not held", ErrInvalidRequest)
	}
	return l.lim.store.Apply(ctx, l.request(false))
}

func (l *Lease) request(release bool) Request {
	return Request{Key: l.key, Algorithm: l.lim.alg, Limit: l.lim.limit, Cost: l.cost, Lease: l.id, Refund: release}
}

// Acquire is shorthand for AcquireN(ctx, key, 1).
func (l *Limiter) Acquire(ctx context.Context, key string) (*Lease, error) {
	return l.AcquireN(ctx, key, 1)
}

// AcquireN acquires n of key's concurrency slots under a new lease, if n
// are free: at most the limit's Rate slots are held at once, each until
// released or until the limit's Period passes (the lease's time to live).
// The lease's OK reports whether it was acquired; if not, RetryAfter is
// the time until enough leases expire (a release may free slots sooner).
// The limiter's algorithm must hold leases ([Leaser], such as
// algorithms.Concurrency); otherwise AcquireN fails with [ErrUnsupported].
func (l *Limiter) AcquireN(ctx context.Context, key string, n int64) (*Lease, error) {
	if a, ok := l.alg.(Leaser); !ok || !a.Leases() {
		return nil, fmt.Errorf("%w: algorithm %q holds no leases", ErrUnsupported, l.alg.Name())
	}
	ls := &Lease{lim: l, key: key, id: rand.Int64N(MaxUnits) + 1, cost: n}
	d, err := l.store.Apply(ctx, ls.request(false))
	if err != nil {
		return nil, err
	}
	ls.Decision = d
	return ls, nil
}
