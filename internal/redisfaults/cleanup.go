package redisfaults

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
)

// cleanupSlack is what a cleanup may take beyond sluice.CleanupTimeout on a
// busy two-core machine under the race detector: scheduling, not Redis.
const cleanupSlack = 300 * time.Millisecond

// CheckBoundedCleanup makes callers of Wait, Reserve and Cancel,
// Acquire, Release and a stack's Wait hold capacity on store, pauses the
// store's Redis with pause (CLIENT PAUSE ALL), and gives them all up:
// each call must return within its context's end plus
// sluice.CleanupTimeout (and cleanupSlack for a loaded machine) and report
// the refund or release it could not confirm (sluice.ErrCleanup) with the
// reason its caller gave up.
func CheckBoundedCleanup(t *testing.T, store sluice.Store, pause func()) {
	ctx := context.Background()
	slow := sluice.Every(10 * time.Second) // a token every 10s: every wait is long
	lim, err := sluice.NewLimiter(store, algorithms.GCRA, slow)
	if err != nil {
		t.Fatal(err)
	}
	conc, err := sluice.NewLimiter(store, algorithms.Concurrency, sluice.Per(4, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	stack, err := sluice.NewStack(store,
		sluice.Rule{Name: "user", Algorithm: algorithms.TokenBucket, Limit: slow},
		sluice.Rule{Name: "global", Algorithm: algorithms.GCRA, Limit: sluice.PerSecond(1000)})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"wait", "reserve"} {
		if d, err := lim.Allow(ctx, k); err != nil || !d.Allowed {
			t.Fatalf("Allow(%s) = %+v, %v; want the key's one token", k, d, err)
		}
	}
	if v, err := stack.Allow(ctx, "stack", "all"); err != nil || !v.Allowed {
		t.Fatalf("stack.Allow = %+v, %v", v, err)
	}

	// Callers that hold capacity when Redis stops answering.
	r, err := lim.Reserve(ctx, "reserve", time.Minute)
	if err != nil || !r.OK() || r.Delay <= 0 {
		t.Fatalf("Reserve = %+v, %v; want a reservation with a delay", r, err)
	}
	lease, err := conc.Acquire(ctx, "lease")
	if err != nil || !lease.OK() {
		t.Fatalf("Acquire = %+v, %v", lease, err)
	}
	type waiter struct {
		name   string
		cancel context.CancelFunc
		done   chan error
		end    time.Time // when it returned
	}
	waiters := []*waiter{{name: "Limiter.Wait"}, {name: "Stack.Wait"}}
	for _, w := range waiters {
		wctx, cancel := context.WithCancel(ctx)
		w.cancel, w.done = cancel, make(chan error, 1)
		go func() {
			var err error
			if w.name == "Limiter.Wait" {
				_, err = lim.Wait(wctx, "wait")
			} else {
				_, err = stack.Wait(wctx, "stack", "all")
			}
			w.end = time.Now()
			w.done <- err
		}()
	}
	// Each waiter sleeps once its reservation is in the store: the debt
	// shows in a peek.
	for deadline := time.Now().Add(5 * time.Second); ; {
		d1, err1 := lim.Peek(ctx, "wait")
		v2, err2 := stack.Peek(ctx, "stack", "all")
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if d1.RetryAfter > 10*time.Second && v2.RetryAfter > 10*time.Second {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the waiters' reservations never showed: %+v, %+v", d1, v2)
		}
		time.Sleep(5 * time.Millisecond)
	}

	pause()
	// Give up, all at once, while Redis answers no one.
	start := time.Now()
	var wg sync.WaitGroup
	check := func(name string, err error, end time.Time, ended time.Time, cause error) {
		t.Helper()
		if took := end.Sub(ended); took > sluice.CleanupTimeout+cleanupSlack {
			t.Errorf("%s returned %v after its context ended; want at most CleanupTimeout %v + %v", name, took, sluice.CleanupTimeout, cleanupSlack)
		}
		if !errors.Is(err, sluice.ErrCleanup) {
			t.Errorf("%s = %v; want the unconfirmed refund reported (sluice.ErrCleanup)", name, err)
		}
		if cause != nil && !errors.Is(err, cause) {
			t.Errorf("%s = %v; want it to carry %v", name, err, cause)
		}
		t.Logf("%s returned %v after its context ended: %v", name, end.Sub(ended), err)
	}
	for _, w := range waiters {
		w.cancel()
	}
	cancelled, cancelNow := context.WithCancel(ctx)
	cancelNow()
	wg.Add(3)
	go func() {
		defer wg.Done()
		err := r.Cancel(cancelled)
		check("Reservation.Cancel", err, time.Now(), start, nil)
	}()
	go func() {
		defer wg.Done()
		err := lease.Release(cancelled)
		check("Lease.Release", err, time.Now(), start, nil)
	}()
	go func() {
		defer wg.Done()
		actx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		l, err := conc.Acquire(actx, "lease")
		end := time.Now()
		if l != nil {
			t.Errorf("Acquire on a paused Redis = %+v; want no lease", l)
		}
		check("Limiter.Acquire", err, end, start.Add(100*time.Millisecond), context.DeadlineExceeded)
	}()
	for _, w := range waiters {
		err := <-w.done
		check(w.name, err, w.end, start, context.Canceled)
	}
	wg.Wait()
}
