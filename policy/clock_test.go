package policy

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores"
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
		if !m.resting.Load() {
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
		if m.resting.Load() {
			t.Errorf("a call did not wake the meter")
		}
	})
}

// TestStallLeftOutOfLatency checks that a call spanning a stall of the
// process, which the meter saw, counts only the process's time towards
// the deadline: answered calls that each spanned a 30 ms freeze leave the
// per-call deadline at its floor, where timing them by the wall clock
// would raise it to three times 30 ms.
func TestStallLeftOutOfLatency(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var b *Breaker
		frozen := stores.Func(func(context.Context, core.Request) (core.Decision, error) {
			// Off the meter's beat, so that it does not read meanwhile.
			time.Sleep(500 * time.Microsecond)
			r := b.meter.last.Load()
			time.Sleep(30 * time.Millisecond)
			// What the meter reads once a frozen process resumes: the
			// freeze advanced the process clock by one step at most.
			b.meter.last.Store(&reading{wall: b.meter.wallNow(), proc: r.proc + meterStep})
			return core.Decision{Allowed: true}, nil
		})
		b = newBreaker(t, frozen)
		time.Sleep(DefaultWindow / 10) // past the warm-up, which times nothing
		for range 20 {
			if _, err := b.Apply(context.Background(), core.Request{Key: "k", Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(1), Cost: 1}); err != nil {
				t.Fatal(err)
			}
		}
		if got := b.timeoutNow(); got != DefaultTimeout {
			t.Errorf("after calls that each spanned a 30 ms freeze, the per-call deadline is %v, want its floor %v", got, DefaultTimeout)
		}
	})
}
