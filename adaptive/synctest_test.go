package adaptive_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/core"
)

// TestSynctestRun checks that Controller.Run ticks on a testing/synctest
// bubble's clock: each interval slept in the bubble runs one update, an
// hour of them takes no real time, and Close makes Run return, so that
// the bubble can end.
func TestSynctestRun(t *testing.T) {
	t.Parallel()
	began := time.Now()
	synctest.Test(t, func(t *testing.T) {
		law := adaptive.AIMD(adaptive.LatencyAbove(0.99, 50*time.Millisecond), adaptive.Increase(10))
		ctrl, err := adaptive.New(core.PerSecond(100), law, adaptive.WithInterval(time.Second), adaptive.WithBounds(10, 1000))
		if err != nil {
			t.Fatal(err)
		}
		ran := make(chan error, 1)
		go func() { ran <- ctrl.Run(context.Background()) }()

		for i, want := range []core.Limit{core.PerSecond(110), core.PerSecond(120), core.PerSecond(108)} {
			latency := 20 * time.Millisecond
			if i == 2 {
				latency = 80 * time.Millisecond
			}
			for range 30 {
				ctrl.Report(latency, adaptive.OK)
			}
			time.Sleep(time.Second)
			synctest.Wait() // until Run has updated and waits for its next tick
			if st := ctrl.Stats(); st.Intervals != uint64(i+1) || st.Samples != uint64(30*(i+1)) {
				t.Fatalf("after %d s: %+v, want %d intervals and %d samples", i+1, st, i+1, 30*(i+1))
			}
			if got := ctrl.Limit(); got != want {
				t.Errorf("after %d s: limit %v, want %v", i+1, got, want)
			}
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if st := ctrl.Stats(); st.Intervals != 3603 {
			t.Errorf("after an hour more: %d intervals, want 3603", st.Intervals)
		}
		if err := ctrl.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-ran; err != nil {
			t.Errorf("Run returned %v after Close, want nil", err)
		}
	})
	if real := time.Since(began); real > time.Minute {
		t.Errorf("an hour of intervals in the bubble took %v of real time", real)
	}
}
