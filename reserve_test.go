package sluice_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores/memstore"
	"github.com/sluicehq/sluice/stores/storetest"
)

// counting wraps a store and counts its calls: calls counts every call
// that decides (Apply and ApplyAll), batches the ApplyAll calls alone.
type counting struct {
	core.Store
	calls, batches atomic.Int64
}

func (c *counting) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	c.calls.Add(1)
	return c.Store.Apply(ctx, req)
}

func (c *counting) ApplyAll(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	c.calls.Add(1)
	c.batches.Add(1)
	return c.Store.ApplyAll(ctx, reqs, out)
}

func newLimiter(t *testing.T, now func() time.Time, alg core.Algorithm, l core.Limit) (*sluice.Limiter, *counting) {
	t.Helper()
	s, err := memstore.New(memstore.Config{SweepInterval: -1, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	c := &counting{Store: s}
	lim, err := sluice.NewLimiter(c, alg, l)
	if err != nil {
		t.Fatal(err)
	}
	return lim, c
}

func TestReserveSteps(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := t0
	lim, _ := newLimiter(t, func() time.Time { return clock }, algorithms.TokenBucket, core.PerSecond(1).WithBurst(2))
	ctx := context.Background()
	s := time.Second
	reservations := map[int]*sluice.Reservation{} // by step, for the cancels
	for i, st := range []struct {
		at      time.Duration
		op      string // "allow", "reserve" (n, within wait) or "cancel" (of step ref)
		n       int64
		wait    time.Duration
		ref     int
		allowed bool
		delay   time.Duration
		retry   time.Duration
	}{
		0: {0, "allow", 2, 0, 0, true, 0, 0},
		1: {0, "reserve", 1, 2 * s, 0, true, s, 0},          // one token owed: ready at 1 s
		2: {0, "reserve", 1, 2 * s, 0, true, 2 * s, 0},      // the next at 2 s
		3: {0, "reserve", 1, 2*s + s/2, 0, false, 0, 3 * s}, // 3 s > 2.5 s: not made
		4: {0, "allow", 1, 0, 0, false, 0, 3 * s},           // debt: plain requests wait it out
		5: {0, "cancel", 0, 0, 2, true, 0, 0},               // give step 2's token back
		6: {0, "allow", 1, 0, 0, false, 0, 2 * s},
		7: {s, "reserve", 1, s, 0, true, s, 0}, // at 1 s the debt is one token: ready at 2 s
		8: {3 * s, "allow", 1, 0, 0, true, 0, 0},
		9: {3 * s, "allow", 1, 0, 0, false, 0, s},
	} {
		clock = t0.Add(st.at)
		var d core.Decision
		var err error
		switch st.op {
		case "allow":
			d, err = lim.AllowN(ctx, "k", st.n)
		case "reserve":
			var r *sluice.Reservation
			if r, err = lim.ReserveN(ctx, "k", st.n, st.wait); err == nil {
				d = r.Decision
				reservations[i] = r
			}
		case "cancel":
			err = reservations[st.ref].Cancel(ctx)
			if err == nil {
				if err = reservations[st.ref].Cancel(ctx); err == nil {
					d = core.Decision{Allowed: true} // a second cancel is a no-op
				}
			}
		}
		if err != nil {
			t.Fatalf("step %d: %s(%v, %d) failed: %v", i, st.op, st.at, st.n, err)
		}
		if d.Allowed != st.allowed || d.Delay != st.delay || d.RetryAfter != st.retry {
			t.Errorf("step %d: %s(%v, %d, wait %v) = allowed %v, delay %v, retry %v; want %v, %v, %v", i, st.op, st.at, st.n, st.wait, d.Allowed, d.Delay, d.RetryAfter, st.allowed, st.delay, st.retry)
		}
	}
}

func TestReserveUnsupported(t *testing.T) {
	lim, _ := newLimiter(t, nil, algorithms.FixedWindow, core.PerSecond(1))
	if _, err := lim.Reserve(context.Background(), "k", time.Second); !errors.Is(err, core.ErrUnsupported) {
		t.Errorf("Reserve on a fixed window = %v, want ErrUnsupported", err)
	}
	if _, err := lim.Wait(context.Background(), "k"); !errors.Is(err, core.ErrUnsupported) {
		t.Errorf("Wait on a fixed window = %v, want ErrUnsupported", err)
	}
	// The store validates the request, and refuses it.
	lim, _ = newLimiter(t, nil, algorithms.TokenBucket, core.PerSecond(1))
	if _, err := lim.Reserve(context.Background(), "k", 0); !errors.Is(err, core.ErrInvalidRequest) {
		t.Errorf("Reserve with no wait = %v, want ErrInvalidRequest", err)
	}
}

func TestWaitFailsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim, c := newLimiter(t, nil, algorithms.TokenBucket, core.PerSecond(10).WithBurst(5))
		ctx := context.Background()
		if _, err := lim.WaitN(ctx, "k", 6); !errors.Is(err, sluice.ErrUnsatisfiable) {
			t.Errorf("WaitN(6) under burst 5 = %v, want ErrUnsatisfiable", err)
		}
		if _, err := lim.WaitN(ctx, "k", 5); err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
		defer cancel()
		start := time.Now()
		if _, err := lim.WaitN(short, "k", 2); !errors.Is(err, sluice.ErrWaitTooLong) {
			t.Errorf("WaitN(2) needing 200ms within 150ms = %v, want ErrWaitTooLong", err)
		}
		if waited := time.Since(start); waited != 0 {
			t.Errorf("a wait that cannot fit slept %v", waited)
		}
		if _, err := lim.WaitN(short, "k", 1); err != nil {
			t.Errorf("WaitN(1) needing 100ms within 150ms: %v", err)
		}
		if waited := time.Since(start); waited != 100*time.Millisecond {
			t.Errorf("WaitN(1) slept %v, want 100ms", waited)
		}
		if n := c.calls.Load(); n != 4 {
			t.Errorf("%d store calls for 4 waits, want 4: no polling", n)
		}
	})
}

func TestWaitCancelledRefunds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim, _ := newLimiter(t, nil, algorithms.TokenBucket, core.PerSecond(1))
		ctx := context.Background()
		if _, err := lim.Allow(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(300*time.Millisecond, cancel)
		if _, err := lim.Wait(cctx, "k"); !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait cancelled after 300ms = %v, want context.Canceled", err)
		}
		// The cancelled wait gave its token back: the next comes at 1 s.
		time.Sleep(700 * time.Millisecond)
		if d, _ := lim.Allow(ctx, "k"); !d.Allowed {
			t.Errorf("at 1s after a cancelled wait: %+v, want allowed", d)
		}
	})
}

// lateTimer is a context whose deadline has passed while its timer has
// not yet run, as on a stalled process: Deadline reports the deadline,
// and Done never closes.
type lateTimer struct {
	context.Context
	deadline time.Time
}

func (c lateTimer) Deadline() (time.Time, bool) { return c.deadline, true }

// TestWaitEndsByTheDeadline checks that Wait never admits once its
// context has ended or its deadline has passed. The store counts the
// wait it may grant from the instant it decides, a call's latency after
// Wait measured the time left, so it can grant a slot past the deadline;
// a process that stalls over the deadline then finds its wait over and
// the deadline's timer not yet run. Wait gives the capacity back and
// fails with the deadline's error. A slot that comes exactly at the
// deadline does likewise: the caller cannot act before it.
func TestWaitEndsByTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const latency = 30 * time.Millisecond
		mem, err := memstore.New(memstore.Config{SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { mem.Close() })
		slow := storetest.NewFaulty(mem) // each call answered after a latency, as a remote store's
		slow.SetLatency(latency)
		lim, err := sluice.NewLimiter(slow, algorithms.TokenBucket, core.PerSecond(10).WithBurst(1))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		t0 := time.Now()
		if d, err := lim.Allow(ctx, "k"); err != nil || !d.Allowed {
			t.Fatalf("Allow = %+v, %v", d, err)
		}
		// The store took the token at t0+30ms; the next is due at
		// t0+130ms. Wait begins with 90 ms left, and the store decides
		// 30 ms later that it may wait 70 ms of the 90: its slot comes
		// 10 ms past the deadline.
		late := lateTimer{ctx, time.Now().Add(90 * time.Millisecond)}
		if d, err := lim.Wait(late, "k"); !errors.Is(err, context.DeadlineExceeded) || d.Allowed {
			t.Fatalf("a wait whose slot falls past the deadline = %+v, %v; want context.DeadlineExceeded", d, err)
		}
		// The capacity came back: the token due at t0+130ms is there
		// for an Allow that the store decides then.
		time.Sleep(time.Until(t0.Add(100 * time.Millisecond)))
		if d, err := lim.Allow(ctx, "k"); err != nil || !d.Allowed {
			t.Errorf("Allow at the next token after the refund = %+v, %v; want allowed", d, err)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		lim, _ := newLimiter(t, nil, algorithms.TokenBucket, core.PerSecond(10).WithBurst(1))
		ctx := context.Background()
		if d, err := lim.Allow(ctx, "k"); err != nil || !d.Allowed {
			t.Fatalf("Allow = %+v, %v", d, err)
		}
		// The next slot is 100 ms away: exactly the deadline.
		exact, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		if d, err := lim.Wait(exact, "k"); !errors.Is(err, context.DeadlineExceeded) || d.Allowed {
			t.Fatalf("a wait whose slot is the deadline = %+v, %v; want context.DeadlineExceeded", d, err)
		}
		// Given back: the slot is there for the next caller.
		if d, err := lim.Allow(ctx, "k"); err != nil || !d.Allowed {
			t.Errorf("Allow at the refunded slot = %+v, %v; want allowed", d, err)
		}
	})
}

// TestWaitConcurrentSafe has 64 goroutines wait on one key for 5 s at
// 10/s: every admission comes on the schedule the rate sets, and each costs
// one store call.
func TestWaitConcurrentSafe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim, c := newLimiter(t, nil, algorithms.TokenBucket, core.PerSecond(10).WithBurst(1))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		var mu sync.Mutex
		var at []time.Duration
		var wg sync.WaitGroup
		for range 64 {
			wg.Go(func() {
				for {
					if _, err := lim.Wait(ctx, "k"); err != nil {
						return
					}
					mu.Lock()
					at = append(at, time.Since(start))
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		// One at once, then one every 100ms before the deadline: the
		// slot at the deadline is given back.
		if len(at) != 50 {
			t.Errorf("%d admissions in 5s at 10/s with a burst of 1, want 50", len(at))
		}
		for i, d := range at {
			if want := time.Duration(i) * 100 * time.Millisecond; d != want {
				t.Fatalf("admission %d at %v, want %v", i, d, want)
			}
		}
		// Each goroutine ends with at most one reservation that cannot
		// fit; one had the slot at the deadline, and gave it back.
		if calls := c.calls.Load(); calls > int64(len(at))+64+1 {
			t.Errorf("%d store calls for %d admissions, want one each, one final refusal per goroutine and one refund", calls, len(at))
		}
	})
}
