package adaptive_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/core"
)

// TestLatencyStepStaysHigh steps the downstream's latency from 10 ms to
// 80 ms and keeps it there for as long as the limit stays above the
// downstream's new capacity, 100/s; below it, latency is 10 ms again.
// Flat latency is not improving latency: each law must cut in every
// interval at 80 ms until the limit is under the capacity, and then rise
// again. (The AIMD law once read equal quantiles as improvement, made one
// cut and held at 80 ms for good.) Virtual time: the intervals are the
// bubble's.
func TestLatencyStepStaysHigh(t *testing.T) {
	t.Parallel()
	laws := []struct {
		name string
		law  adaptive.Law
	}{
		{"AIMD", adaptive.AIMD(adaptive.LatencyAbove(0.99, 40*time.Millisecond), adaptive.Increase(10))},
		{"Gradient", adaptive.Gradient()},
	}
	for _, tc := range laws {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) { latencyStep(t, tc.law) })
		})
	}
}

func latencyStep(t *testing.T, law adaptive.Law) {
	const (
		step     = 3   // the interval in which capacity falls
		capacity = 100 // per second, from step on
		rounds   = 40  // intervals in all
		fast     = 10 * time.Millisecond
		slow     = 80 * time.Millisecond
	)
	ctrl, err := adaptive.New(core.PerSecond(200), law, adaptive.WithInterval(time.Second), adaptive.WithBounds(10, 1000))
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- ctrl.Run(context.Background()) }()
	defer func() {
		if err := ctrl.Close(); err != nil {
			t.Error(err)
		}
		<-ran
	}()

	recovered := -1 // the first interval after the step at 10 ms
	for i := range rounds {
		before := ctrl.Limit().Rate()
		latency := fast
		if i >= step && before > capacity {
			latency = slow
		}
		for range 30 {
			ctrl.Report(latency, adaptive.OK)
		}
		time.Sleep(time.Second)
		synctest.Wait() // until Run has updated and waits for its next tick
		after := ctrl.Limit().Rate()
		switch {
		case latency == slow && after >= before:
			t.Fatalf("interval %d: latency %v at %d/s, above the capacity: limit %d/s after it, want a cut", i, latency, before, after)
		case i >= step && latency == fast && recovered < 0:
			recovered = i
		}
		if recovered >= 0 && latency == fast && after <= before {
			t.Errorf("interval %d: latency %v at %d/s: limit %d/s, want it to rise", i, latency, before, after)
		}
	}
	if recovered < 0 {
		t.Fatalf("the limit never fell under the capacity of %d/s: %v", capacity, ctrl.Limit())
	}
}
