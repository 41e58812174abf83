package layered_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores/layered"
)

// TestClockStepsBack runs a token bucket key through a layered store over
// a memstore, both on one clock that steps back after the key is charged
// to empty at t0. The key stays denied until the clock is back at t0+1s,
// where the remote said it would pass; the deny cache answers the
// stepped-back requests as the remote does, at the key's last charge:
// At t0, RetryAfter 1s.
func TestClockStepsBack(t *testing.T) {
	t.Parallel()
	const us = time.Microsecond
	steps := []struct {
		clock   time.Duration // the clock, from t0
		allowed bool
		at      time.Duration // Decision.At, from t0
		retry   time.Duration
	}{
		{0, true, 0, 0}, // takes the only token
		{0, false, 0, time.Second},
		{-time.Second, false, 0, time.Second},
		{-time.Hour, false, 0, time.Second},
		{time.Second - us, false, time.Second - us, us},
		{time.Second, true, time.Second, 0},
	}
	c := newClock()
	t0 := c.Now()
	s := newLayered(t, newMem(t, c), layered.Config{Now: c.Now})
	lim, err := sluice.NewLimiter(s, algorithms.TokenBucket, core.PerSecond(1))
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range steps {
		c.Advance(t0.Add(st.clock).Sub(c.Now()))
		d, err := lim.Allow(context.Background(), "k")
		if err != nil {
			t.Fatalf("step %d: Allow(t0%+.9gs): %v", i, st.clock.Seconds(), err)
		}
		if d.Allowed != st.allowed || !d.At.Equal(t0.Add(st.at)) || d.RetryAfter != st.retry {
			t.Errorf("step %d: Allow(t0%+.9gs) = %s at t0%+.9gs; want allowed %v, retry %v at t0%+.9gs",
				i, st.clock.Seconds(), describe(d), d.At.Sub(t0).Seconds(), st.allowed, st.retry, st.at.Seconds())
		}
	}
}

// TestAllotmentClockStepsBack allots a token bucket key 2 tokens at a time on a
// clock that steps back below the instant the store was made, after a
// wait for an allotment has come and gone. Every denial's instant of passing,
// At.Add(RetryAfter), must be one at which the request passes: a wait
// left over from before the step would name one too early.
func TestAllotmentClockStepsBack(t *testing.T) {
	t.Parallel()
	c := newClock()
	t0 := c.Now()
	s := newLayered(t, newMem(t, c), layered.Config{Now: c.Now, Allot: func(core.Request) int64 { return 2 }})
	lim, err := sluice.NewLimiter(s, algorithms.TokenBucket, core.PerSecond(1).WithBurst(2))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	at := func(clock time.Duration) core.Decision {
		t.Helper()
		c.Advance(t0.Add(clock).Sub(c.Now()))
		d, err := lim.Allow(ctx, "k")
		if err != nil {
			t.Fatalf("Allow(t0%+.9gs): %v", clock.Seconds(), err)
		}
		return d
	}
	for _, clock := range []time.Duration{0, 0, 0, 2 * time.Second, 2 * time.Second} {
		d := at(clock)
		t.Logf("t0%+.9gs: %s at t0%+.9gs", clock.Seconds(), describe(d), d.At.Sub(t0).Seconds())
	}
	d := at(-time.Hour)
	if d.Allowed {
		t.Fatalf("allowed at t0-1h after the bucket was emptied at t0+2s: %s", describe(d))
	}
	passes := d.At.Add(d.RetryAfter)
	c.Advance(passes.Sub(c.Now()))
	if again, err := lim.Allow(ctx, "k"); err != nil || !again.Allowed {
		t.Fatalf("denied at t0-1h (%s at t0%+.9gs), passing at t0%+.9gs; there: %s, %v",
			describe(d), d.At.Sub(t0).Seconds(), passes.Sub(t0).Seconds(), describe(again), err)
	}
}
