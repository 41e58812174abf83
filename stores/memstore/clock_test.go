package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/stores/memstore"
)

// TestClockStepsBack runs a token bucket key on a Config.Now that steps
// back, sweeping before every step. A key the store holds is decided at
// its last charge, however far back the clock goes: the same denial, the
// same RetryAfter, and At the charge's instant, not the clock's (decided
// at t0−1s, the bucket would have a second less to refill and wait 2s);
// no sweep drops it before the clock is back at its refill. A key swept
// once its bucket was full is gone: an earlier reading finds it fresh,
// decided at that reading.
func TestClockStepsBack(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	const us = time.Microsecond
	type step struct {
		clock   time.Duration // the store's clock, from t0
		cost    int64
		keys    int // held after the sweep before the step
		allowed bool
		retry   time.Duration
		at      time.Duration // Decision.At, from t0
	}
	tables := []struct {
		name  string
		steps []step
	}{
		{"kept", []step{
			{0, 1, 0, true, 0, 0}, // takes the only token
			{0, 1, 1, false, time.Second, 0},
			{-time.Second, 1, 1, false, time.Second, 0},
			{-time.Hour, 1, 1, false, time.Second, 0},
			{time.Second - us, 1, 1, false, us, time.Second - us},
			{time.Second, 1, 0, true, 0, time.Second}, // full again: swept, and fresh
		}},
		{"swept", []step{
			{0, 1, 0, true, 0, 0},
			{time.Second, 0, 0, true, 0, time.Second}, // a cost of 0 stores nothing
			{time.Second / 2, 1, 0, true, 0, time.Second / 2},
			{time.Second / 2, 1, 1, false, time.Second, time.Second / 2},
		}},
	}
	for _, tc := range tables {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := t0
			s, err := memstore.New(memstore.Config{SweepInterval: -1, Now: func() time.Time { return clock }})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			lim, err := sluice.NewLimiter(s, algorithms.TokenBucket, sluice.PerSecond(1))
			if err != nil {
				t.Fatal(err)
			}
			for i, st := range tc.steps {
				clock = t0.Add(st.clock)
				s.Sweep()
				if keys := s.Stats().Keys; keys != st.keys {
					t.Errorf("step %d: at t0%+.9gs the sweep left %d keys, want %d", i, st.clock.Seconds(), keys, st.keys)
				}
				d, err := lim.AllowN(context.Background(), "k", st.cost)
				if err != nil {
					t.Fatalf("step %d: AllowN(t0%+.9gs, %d): %v", i, st.clock.Seconds(), st.cost, err)
				}
				if d.Allowed != st.allowed || d.RetryAfter != st.retry || !d.At.Equal(t0.Add(st.at)) {
					t.Errorf("step %d: AllowN(t0%+.9gs, %d) = allowed %v, retry %v, at t0%+.9gs; want allowed %v, retry %v, at t0%+.9gs",
						i, st.clock.Seconds(), st.cost, d.Allowed, d.RetryAfter, d.At.Sub(t0).Seconds(), st.allowed, st.retry, st.at.Seconds())
				}
			}
		})
	}
}
