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
// and no Apply. It is safe for concurrent use.
type Counter struct {
	inner core.Store
	apply atomic.Int64
	all   atomic.Int64
	reset atomic.Int64
}

var _ core.Store = (*Counter)(nil)

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
