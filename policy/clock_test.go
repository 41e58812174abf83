package policy

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// beatsUntil takes m's readings as its goroutine would, a millisecond
// apart, from now until the wall instant end, except while the process
// is frozen (from freezeAt for frozen), when no reading is taken, since
// nothing of the process runs.
func beatsUntil(m *meter, end, freezeAt, frozen time.Duration) {
	for {
		now := m.wallNow()
		if now >= int64(end) {
			return
		}
		if now >= int64(freezeAt) && now < int64(freezeAt+frozen) {
			time.Sleep(time.Duration(min(int64(freezeAt+frozen), int64(end)) - now))
			continue
		}
		last := m.last.Load()
		m.last.Store(&reading{wall: now, proc: last.proc + min(now-last.wall, meterStep)})
		time.Sleep(meterBeat)
	}
}

// newTestMeter returns a meter without a goroutine: the test takes its
// readings.
func newTestMeter() *meter {
	m := &meter{base: time.Now()}
	m.last.Store(&reading{})
	return m
}

// TestProcessDeadline checks that a deadline on the process clock leaves
// out the time the process was frozen: a deadline of 8 ms begun 2 ms
// before a freeze of 30 ms ends 6 ms after it, not during it; without a
// freeze it ends at 8 ms; and a process that never runs again ends it at
// the stall bound, not as the store's failure.
func TestProcessDeadline(t *testing.T) {
	t.Parallel()
	const span = 8 * time.Millisecond
	for _, tc := range []struct {
		name             string
		freezeAt, frozen time.Duration
		want             time.Duration
		why              endReason
	}{
		{"steady", 0, 0, span, ranOut},
		{"frozen 30ms", 2 * time.Millisecond, 30 * time.Millisecond, 38 * time.Millisecond, ranOut},
		{"frozen for good", 2 * time.Millisecond, time.Hour, span + stallBound, bounded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := newTestMeter()
				go beatsUntil(m, 2*stallBound, tc.freezeAt, tc.frozen)
				ctx := m.context(context.Background(), span, m.wallNow())
				start := time.Now()
				<-ctx.Done()
				// A deadline ends within a meter's step of its span on
				// the process clock.
				if took := time.Since(start); took < tc.want-time.Duration(meterStep) || took > tc.want+time.Duration(meterStep) {
					t.Errorf("the deadline ended after %v, want %v ± %v", took, tc.want, time.Duration(meterStep))
				}
				if why := ctx.pd.ended(); why != tc.why {
					t.Errorf("ended for reason %d, want %d", why, tc.why)
				}
				if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
					t.Errorf("Err() = %v, want context.DeadlineExceeded", ctx.Err())
				}
				child, cancel := context.WithCancel(ctx)
				defer cancel()
				if !errors.Is(child.Err(), context.DeadlineExceeded) {
					t.Errorf("a context derived after the end: Err() = %v, want context.DeadlineExceeded", child.Err())
				}
				time.Sleep(2 * stallBound)
			})
		})
	}
}

// TestMeterRests checks that a meter with no calls to time rests after
// meterIdle readings, keeps pace with the wall clock meanwhile, and that
// a call wakes it.
func TestMeterRests(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Uint64
		m := startMeter(time.Now(), &calls, nil)
		defer m.close()
		calls.Add(1)
		m.awake(m.wallNow())
		time.Sleep((meterIdle + 5) * meterBeat)
		synctest.Wait()
		if !m.last.Load().resting {
			t.Fatalf("the meter did not rest after %d readings without a call", meterIdle)
		}
		p0, w0 := m.at(m.wallNow()), m.wallNow()
		time.Sleep(time.Hour)
		if p, w := m.at(m.wallNow()), m.wallNow(); p-p0 != w-w0 {
			t.Errorf("at rest the process clock moved %v in %v of the wall clock's", time.Duration(p-p0), time.Duration(w-w0))
		}
		calls.Add(1)
		m.awake(m.wallNow())
		synctest.Wait()
		if m.last.Load().resting {
			t.Errorf("a call did not wake the meter")
		}
	})
}

// TestWakingRace checks that a call reading the process clock while
// another wakes the resting meter reads it at the wall clock's pace: the
// meter's state and its reading are read as one.
func TestWakingRace(t *testing.T) {
	t.Parallel()
	const rested = 50 * time.Millisecond
	var low int
	for range 3000 {
		m := newTestMeter()
		m.base = time.Now().Add(-rested)
		m.wake = make(chan struct{}, 1)
		m.last.Store(&reading{resting: true})
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { <-start; m.awake(m.wallNow()) })
		wg.Go(func() {
			<-start
			for range 100 {
				if p := m.at(m.wallNow()); p < int64(rested) {
					low++
					return
				}
			}
		})
		close(start)
		wg.Wait()
	}
	if low > 0 {
		t.Errorf("in %d of 3000 wake-ups a reading came out below the %v the meter rested", low, rested)
	}
}
