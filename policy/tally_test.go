package policy

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/core"
)

// paceMeter puts in the place of b's stall meter one whose readings a
// goroutine of the test takes, gap apart on the wall clock: at a gap of
// a meter's beat the process clock keeps pace with the wall clock, and at
// a gap of k steps it runs at 1/k of its pace, as on a process that waits
// for a core most of the time. The goroutine ends at b's Close.
func paceMeter(b *Breaker, gap *atomic.Int64) {
	b.meter.close()
	m := &meter{base: b.base, activity: &b.calls, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	close(m.done)
	r := *b.meter.last.Load()
	r.resting = false
	m.last.Store(&r)
	b.meter, b.deadlines.m = m, m
	go func() {
		for {
			select {
			case <-m.stop:
				return
			case <-time.After(time.Duration(gap.Load())):
			}
			now, last := m.wallNow(), m.last.Load()
			m.last.Store(&reading{wall: now, proc: last.proc + min(now-last.wall, meterStep), cpu: -1})
		}
	}()
}

// flaky fails every other call with a refused connection while on.
type flaky struct {
	core.Store
	on atomic.Bool
	n  atomic.Uint64
}

func (s *flaky) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	if s.on.Load() && s.n.Add(1)%2 == 0 {
		return core.Decision{}, refused
	}
	return s.Store.Apply(ctx, req)
}

// TestRatioOnProcessClock checks that the trip rule's ratio weighs the
// last window of the process clock, not of the wall clock. On a process
// whose clock runs at a fifth of the wall clock's pace, a stall of two
// deadlines on its clock lasts a whole window of wall time: weighed on
// the wall clock, its failures stood alone and opened the circuit on a
// healthy store; on the process clock the successes of the rest of the
// window outweigh them. A store that fails every other call, which no
// run of failures catches, still opens the circuit by the ratio within a
// window of the process clock.
func TestRatioOnProcessClock(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const deadline = 100 * time.Millisecond
		f := &fake{}
		s := &flaky{Store: f}
		b := settled(newBreaker(t, s, WithTimeout(deadline)))
		var gap atomic.Int64
		gap.Store(int64(meterBeat))
		paceMeter(b, &gap)

		stop := make(chan struct{})
		var wg sync.WaitGroup
		defer func() { close(stop); wg.Wait() }()
		for g := range 64 {
			wg.Go(func() {
				r := req("k" + strconv.Itoa(g))
				time.Sleep(time.Duration(g) * 10 * time.Millisecond / 64) // a steady flow of calls
				for {
					select {
					case <-stop:
						return
					default:
					}
					b.Apply(context.Background(), r)
					time.Sleep(10 * time.Millisecond)
				}
			})
		}
		keepClosed := func(what string) {
			t.Helper()
			if b.State() != Closed || b.BreakerChanges() != 0 {
				t.Fatalf("%s: the circuit is %v after %d changes, want closed (%+v, counts %+v)", what, b.State(), b.BreakerChanges(), b.Stats(), b.Counts())
			}
		}
		time.Sleep(time.Second)
		keepClosed("at full pace")
		gap.Store(5 * meterStep) // the process clock at a fifth of the wall's
		time.Sleep(4 * time.Second)
		keepClosed("at a fifth of the pace")

		// The store stalls for two deadlines of the process clock: a
		// second of the wall clock's.
		stalled := b.procNow()
		f.set(nil, true)
		time.Sleep(time.Second)
		f.set(nil, false)
		if took := time.Duration(b.procNow() - stalled); took < 2*deadline-time.Duration(meterStep) || took > 2*deadline+time.Duration(meterStep) {
			t.Fatalf("the stall lasted %v on the process clock, want %v", took, 2*deadline)
		}
		c, st := b.Counts(), b.Stats()
		if st.Failures < 64 {
			t.Fatalf("%d calls failed in the stall, want one at least of each of the 64 callers (%+v)", st.Failures, st)
		}
		t.Logf("after the stall: %+v, counts %+v", st, c)
		time.Sleep(time.Second)
		keepClosed("after the stall")

		// Every other call fails: each success ends the run, and half the
		// window's calls fail.
		failing := b.procNow()
		s.on.Store(true)
		opened, ok := waitState(b, Open, 10*time.Second)
		s.on.Store(false)
		if !ok {
			t.Fatalf("every other call failing: the circuit did not open within 10 s (%+v, counts %+v)", b.Stats(), b.Counts())
		}
		if took := time.Duration(b.procNow() - failing); took > DefaultWindow {
			t.Errorf("every other call failing: the circuit opened %v later on the process clock (%v of the wall clock's), want within a window, %v", took, time.Since(opened), DefaultWindow)
		}
		time.Sleep(DefaultOpenTimeout + time.Second) // the calls still detached end
	})
}
