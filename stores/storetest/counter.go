package storetest

import (
	"context"
	"sync/atomic"

	"github.com/sluicehq/sluice/core"
)

// Counter is a store decorator that counts the calls it forwards to the
// store it wraps and that store decides: a call the store refuses as
// invalid or unsupported (an error [core.Classify] calls
// "invalid_request" or "unsupported") is not counted, since stores, not
// the decorators above them, validate what they decide. Put one under a
// chain of decorators to check what reaches the backend: a stack decided
// atomically through every layer reaches it as one ApplyAll per decision
// and no Apply. A batch of calls ([core.Batcher]) counts each call as the
// Apply or ApplyAll it stands for, and itself in [Counter.Batches]. It is
// safe for concurrent use.
type Counter struct {
	inner   core.Store
	apply   atomic.Int64
	all     atomic.Int64
	reset   atomic.Int64
	batches atomic.Int64
}

var _ core.Batcher = (*Counter)(nil)

// NewCounter returns a Counter in front of inner.
func NewCounter(inner core.Store) *Counter { return &Counter{inner: inner} }

// Apply forwards the call, and counts it unless the store refused it.
func (c *Counter) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	d, err := c.inner.Apply(ctx, req)
	if !refused(err) {
		c.apply.Add(1)
	}
	return d, err
}

// ApplyAll forwards the call, and counts it unless the store refused it.
func (c *Counter) ApplyAll(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	err := c.inner.ApplyAll(ctx, reqs, out)
	if !refused(err) {
		c.all.Add(1)
	}
	return err
}

// ApplyBatch forwards the batch, in one call if the inner store is a
// [core.Batcher] and call by call otherwise, and counts each call the
// store did not refuse as an Apply (a single request) or an ApplyAll.
func (c *Counter) ApplyBatch(ctx context.Context, calls []*core.Call) {
	c.batches.Add(1)
	if b, ok := c.inner.(core.Batcher); ok {
		b.ApplyBatch(ctx, calls)
	} else {
		for _, call := range calls {
			if len(call.Reqs) == 1 && len(call.Out) == 1 {
				call.Out[0], call.Err = c.inner.Apply(call.Ctx, call.Reqs[0])
			} else {
				call.Err = c.inner.ApplyAll(call.Ctx, call.Reqs, call.Out)
			}
		}
	}
	for _, call := range calls {
		switch {
		case refused(call.Err):
		case len(call.Reqs) == 1 && len(call.Out) == 1:
			c.apply.Add(1)
		default:
			c.all.Add(1)
		}
	}
}

// refused reports whether err is a store's refusal of a request it
// could not decide as asked.
func refused(err error) bool {
	t := core.Classify(err).Type
	return t == core.FailureInvalidRequest || t == core.FailureUnsupported
}

// Reset counts the call and forwards it.
func (c *Counter) Reset(ctx context.Context, key string, alg core.Algorithm) error {
	c.reset.Add(1)
	return c.inner.Reset(ctx, key, alg)
}

// Close closes the inner store.
func (c *Counter) Close() error { return c.inner.Close() }

// Unwrap returns the inner store.
func (c *Counter) Unwrap() core.Store { return c.inner }

// Counts returns how many calls of each method the Counter has forwarded
// that the store decided (Reset: every call).
func (c *Counter) Counts() (apply, applyAll, reset int64) {
	return c.apply.Load(), c.all.Load(), c.reset.Load()
}

// Batches returns how many batches of calls the Counter has forwarded.
func (c *Counter) Batches() int64 { return c.batches.Load() }
