package casstore

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice/core"
)

// Wrap returns err, from doing what (such as "deciding"), with an
// adapter's prefix (its package's name), and marked with
// [core.ErrUnavailable] if unavailable(err): if any call would get err
// while the database stays as it is, which package policy's breaker
// counts as the store's failure. An adapter wraps its Backend's errors
// with it ([Backend.Swap]), giving its own prefix and its database's
// classification.
func Wrap(prefix, doing string, err error, unavailable func(error) bool) error {
	if unavailable(err) {
		return fmt.Errorf("%s: %s: %w: %w", prefix, doing, core.ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %s: %w", prefix, doing, err)
}

// Setup runs a backend's setup, such as creating its table, on the first
// call that needs it rather than in the adapter's constructor, so that a
// process starts while its database is down; a setup that failed is run
// again by the next call. The zero Setup is ready to use. It is safe for
// concurrent use: callers wait while one runs the setup.
type Setup struct {
	done atomic.Bool // a setup succeeded
	mu   sync.Mutex  // held while one runs
}

// Do calls f unless a call of f has succeeded, and returns its error.
func (s *Setup) Do(f func() error) error {
	if s.done.Load() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done.Load() {
		return nil
	}
	if err := f(); err != nil {
		return err
	}
	s.done.Store(true)
	return nil
}
