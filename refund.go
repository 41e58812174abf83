package sluice

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core"
)

// refund gives back what reqs, refunds already, charged on store: a
// reservation's cancellation or a lease's release. It is a cleanup made on
// the caller's behalf, so it runs with ctx's values but not its
// cancellation, within [CleanupTimeout]; a failure wraps [ErrCleanup],
// with what saying which cleanup failed.
func refund(ctx context.Context, store Store, reqs []core.Request, what string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
	defer cancel()
	if _, err := apply(ctx, store, reqs); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrCleanup, what, err)
	}
	return nil
}

// ended reports whether ctx has ended: done, or past its deadline, which
// a client may report (rueidis does) before the context's own timer has
// fired.
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}
