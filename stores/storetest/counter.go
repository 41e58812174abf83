package storetest

import (
	"context"
	"sync/atomic"

	"github.com/sluicehq/sluice/core"
)

// Counter is a store decorator that counts the calls it forwards to the
// store it wraps. Put one under a chain of decorators to check what
// reaches the backend: a stack decided atomically through every layer
// reaches it as one ApplyAll per decision and no Apply. It is safe for
// concurrent use.
type Counter struct {
	inner core.Store
	apply atomic.Int64
	all   atomic.Int64
	reset atomic.Int64
}

var _ core.Store = (*Counter)(nil)

// NewCounter returns a Counter in front of inner.
func NewCounter(inner core.Store) *Counter { return &Counter{inner: inner} }

// Apply counts the call and forwards it.
func (c *Counter) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	c.apply.Add(1)
	return c.inner.Apply(ctx, req)
}

// ApplyAll counts the call and forwards it.
func (c *Counter) ApplyAll(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	c.all.Add(1)
	return c.inner.ApplyAll(ctx, reqs, out)
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

// Counts returns how many calls of each method the Counter has forwarded.
func (c *Counter) Counts() (apply, applyAll, reset int64) {
	return c.apply.Load(), c.all.Load(), c.reset.Load()
}
