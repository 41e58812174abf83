package sluice_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/stores/memstore"
)

// source is a LimitSource whose limit a test sets.
type source struct{ l atomic.Pointer[sluice.Limit] }

func (s *source) Limit() sluice.Limit { return *s.l.Load() }

func (s *source) set(l sluice.Limit) { s.l.Store(&l) }

// TestFollowing checks that a limiter following a source decides each
// call under the source's limit at that moment, reports it as its
// Limit, leaves the limiter it came from alone, and that a limit the
// algorithm cannot use fails the call, not the process.
func TestFollowing(t *testing.T) {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()
	base, err := sluice.NewLimiter(store, algorithms.TokenBucket, sluice.PerMinute(2))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := base.Following(nil); !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Errorf("Following(nil) = %v; want ErrInvalidLimit", err)
	}
	src := &source{}
	src.set(sluice.PerMinute(5))
	lim, err := base.Following(src)
	if err != nil {
		t.Fatal(err)
	}
	if lim.Limit() != sluice.PerMinute(5) || base.Limit() != sluice.PerMinute(2) {
		t.Errorf("Limit() = %v (base %v); want the source's, 5/min, and 2/min", lim.Limit(), base.Limit())
	}
	for i := range 5 {
		if d, err := lim.Allow(ctx, "k"); err != nil || !d.Allowed || d.Limit != 5 {
			t.Fatalf("call %d under 5/min = %+v, %v; want allowed, limit 5", i, d, err)
		}
	}
	if d, _ := lim.Allow(ctx, "k"); d.Allowed {
		t.Errorf("a 6th call under 5/min was allowed")
	}
	// The source moves: the next call is decided under the new limit.
	src.set(sluice.PerMinute(10).WithBurst(10))
	if d, err := lim.Peek(ctx, "k2"); err != nil || d.Limit != 10 || d.Remaining != 9 {
		t.Errorf("Peek after the source moved = %+v, %v; want limit 10, 9 remaining", d, err)
	}
	// A limit the algorithm refuses fails the call.
	var bad sluice.Limit
	src.set(bad)
	if _, err := lim.Allow(ctx, "k3"); !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Errorf("a call under the zero Limit = %v; want ErrInvalidLimit", err)
	}
}
