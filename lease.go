package sluice

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/sluicehq/sluice/core"
)

// Lease is a share of concurrency, acquired by [Limiter.Acquire] or
// [Stack.AcquireN] and held until [Lease.Release] or until the limit's
// Period passes since it was acquired or last renewed ([Lease.Renew]): a
// holder that crashes never keeps its slots for longer than that. A
// Lease is safe for concurrent use.
type Lease struct {
	// Verdict is the store's answer to the acquisition: Allowed reports
	// whether the slots were acquired (and, for a stack, every other rule
	// admitted the request), Remaining how many are left.
	Verdict
	store Store
	held  []core.Request // the concurrency rules' requests

	mu       sync.Mutex // held across a release, so concurrent calls agree
	released bool
}

// OK reports whether the lease was acquired.
func (l *Lease) OK() bool { return l.Allowed }

// ID returns the lease's identifier under its first concurrency rule: a
// random number from 1 to 2^52, which is what the store keeps (see
// [core.Request.Lease]); 0 if the lease holds none.
func (l *Lease) ID() int64 {
	if len(l.held) == 0 {
		return 0
	}
	return l.held[0].Lease
}

// Release gives the lease's slots back, in one store call. Calls after
// the first succeeding one, and on a lease that was not acquired, do
// nothing. It is made even if ctx is done, with ctx's values but not its
// cancellation, and bounded by [CleanupTimeout]; if it fails, Release
// returns an error wrapping [ErrCleanup] and the store's error, and a
// later Release tries again (releasing a lease twice is harmless: the
// second finds nothing held under its identifier). Slots that are never
// released expire with the lease.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.Allowed || l.released || len(l.held) == 0 {
		return nil
	}
	if err := refund(ctx, l.store, l.requests(core.OpRefund), "release lease"); err != nil {
		return err
	}
	l.released = true
	return nil
}

// Renew extends the lease by the limit's Period from now, for work that
// runs longer than one. If the lease has expired meanwhile, Renew acquires
// it again if the key has room, and the verdict says whether it did.
func (l *Lease) Renew(ctx context.Context) (Verdict, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.Allowed || l.released || len(l.held) == 0 {
		return Verdict{}, fmt.Errorf("%w: renewing a lease that is not held", ErrInvalidRequest)
	}
	return apply(ctx, l.store, l.requests(core.OpCharge))
}

// requests returns the lease's requests with operation op, in a new slice.
func (l *Lease) requests(op core.Op) []core.Request {
	reqs := append([]core.Request(nil), l.held...)
	for i := range reqs {
		reqs[i].Op = op
	}
	return reqs
}

// acquire charges reqs on store, all or none, and returns the lease of
// those that hold leases. If ctx ends before the store answers, the store
// may have acquired the slots all the same (a call already sent is
// applied); they are released at once, as a cleanup, since releasing a
// lease the key does not hold changes nothing.
func acquire(ctx context.Context, store Store, reqs []core.Request) (*Lease, error) {
	v, err := apply(ctx, store, reqs)
	if err != nil {
		if !ended(ctx) {
			return nil, err
		}
		var held []core.Request
		for _, r := range reqs {
			if r.Lease != 0 {
				r.Op = core.OpRefund
				held = append(held, r)
			}
		}
		if len(held) > 0 {
			if rerr := refund(ctx, store, held, "release lease of a cancelled acquisition"); rerr != nil {
				return nil, errors.Join(err, rerr)
			}
		}
		return nil, err
	}
	ls := &Lease{Verdict: v, store: store}
	for _, r := range reqs {
		if r.Lease != 0 {
			ls.held = append(ls.held, r)
		}
	}
	return ls, nil
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
// The limiter's algorithm must hold leases ([core.Leaser], such as
// algorithms.Concurrency); otherwise AcquireN fails with [ErrUnsupported].
func (l *Limiter) AcquireN(ctx context.Context, key string, n int64) (*Lease, error) {
	if !core.Leases(l.terms.Algorithm) {
		return nil, fmt.Errorf("%w: algorithm %q holds no leases", ErrUnsupported, l.terms.Algorithm.Name())
	}
	req, err := l.request(key, n, core.OpCharge)
	if err != nil {
		return nil, err
	}
	req.Lease = rand.Int64N(core.MaxUnits) + 1
	return acquire(ctx, l.store, []core.Request{req})
}
