// miniredis runs its Lua in this process, a fresh interpreter a call: the
// race detector makes each call take milliseconds, and the conformance
// suite's 64 goroutines on one lease queue behind each other past the
// 500 ms a release may take (core.CleanupTimeout). make test runs these
// tests without it (.ci/test); the race detector watches the engine
// through the tests on redis-server.

//go:build !race

package redisengine_test

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores/storetest"
)

// TestConformanceMiniredis runs the conformance suite through both
// stores on miniredis, whose Lua has no struct library: the first call
// fails for want of it, and the store sends the portable form of its
// scripts from then on (algorithms.Script.Portable). miniredis's TIME is
// the real clock unless SetTime fixes it, and the suite's tests on the
// store's clock need it to move; its keys expire only on FastForward,
// which no decision needs (a state past its Expires reads as a missing key).
func TestConformanceMiniredis(t *testing.T) {
	forEach(t, func(t *testing.T, c client) {
		// A server per store: miniredis runs one command at a time,
		// and the suite's tests, in parallel on one server, would
		// queue behind each other past the 500 ms that a lease's
		// release may take (core.CleanupTimeout).
		storetest.Run(t, func(t *testing.T) core.Store { return c.open(t, miniredis.RunT(t).Addr()) })
	})
}

// TestMiniredisFixedClock decides at a fixed instant of miniredis's clock
// (SetTime), and after it is moved on: the store's clock is the server's.
func TestMiniredisFixedClock(t *testing.T) {
	forEach(t, func(t *testing.T, c client) {
		m := miniredis.RunT(t)
		t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
		m.SetTime(t0)
		s := c.open(t, m.Addr())
		ctx := context.Background()
		req := core.Request{Key: "k", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(1).WithBurst(2)}}
		for i, want := range []bool{true, true, false} {
			d, err := s.Apply(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed != want || !d.At.Equal(t0) {
				t.Fatalf("step %d: Apply at %v = %+v; want allowed %v at %v", i, t0, d, want, t0)
			}
		}
		m.SetTime(t0.Add(time.Second))
		if d, err := s.Apply(ctx, req); err != nil || !d.Allowed {
			t.Fatalf("Apply a second later = %+v, %v; want allowed", d, err)
		}
	})
}
