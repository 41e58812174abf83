package layered_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/leakcheck"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores"
	"github.com/sluicehq/sluice/stores/layered"
	"github.com/sluicehq/sluice/stores/memstore"
)

// Every test closes what it made: no goroutine of sluice, gobreaker or a
// Redis client may outlive them.
func TestMain(m *testing.M) { redistest.Main(m, leakcheck.Check) }

// prefixes numbers the key prefixes of stores that share a Redis server.
var prefixes atomic.Int64

// clock is a virtual clock, safe for concurrent use.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// counted wraps a store in a stores.Func that counts its calls.
func counted(s core.Store) (core.Store, *atomic.Int64) {
	var calls atomic.Int64
	return stores.Func(func(ctx context.Context, req core.Request) (core.Decision, error) {
		calls.Add(1)
		return s.Apply(ctx, req)
	}), &calls
}

// newMem returns a memstore on c's clock (the wall clock if c is nil),
// closed when the test ends.
func newMem(t testing.TB, c *clock) *memstore.Store {
	t.Helper()
	cfg := memstore.Config{SweepInterval: -1}
	if c != nil {
		cfg.Now = c.Now
	}
	m, err := memstore.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// newLayered returns a layered store over remote, closed when the test
// ends.
func newLayered(t testing.TB, remote core.Store, cfg layered.Config) *layered.Store {
	t.Helper()
	s, err := layered.New(remote, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// fixed returns an Allot function that allots n to every request.
func fixed(n int64) func(core.Request) int64 { return func(core.Request) int64 { return n } }

// peekIf returns core.OpPeek if peek is true, core.OpCharge otherwise.
func peekIf(peek bool) core.Op {
	if peek {
		return core.OpPeek
	}
	return core.OpCharge
}

// describe formats a decision for failure messages.
func describe(d core.Decision) string {
	return fmt.Sprintf("{allowed %v, remaining %d, retry %v, reset %v, from %v}", d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter, d.Source)
}
