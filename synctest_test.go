package sluice_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/stores/memstore"
)

// TestSynctestWait checks that Limiter.Wait, Limiter.Reserve and
// Stack.Wait keep a testing/synctest bubble's time: a Wait returns after
// exactly its delay on the bubble's clock, which takes no real time; a
// Wait whose context ends gives its capacity back; a Wait that would
// outlast its deadline fails at once.
func TestSynctestWait(t *testing.T) {
	t.Parallel()
	began := time.Now()
	synctest.Test(t, func(t *testing.T) {
		s, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		lim, err := sluice.NewLimiter(s, algorithms.TokenBucket, sluice.PerHour(1))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if d, err := lim.Allow(ctx, "k"); err != nil || !d.Allowed {
			t.Fatalf("Allow = %+v, %v", d, err)
		}
		start := time.Now()
		if d, err := lim.Wait(ctx, "k"); err != nil || !d.Allowed {
			t.Fatalf("Wait = %+v, %v", d, err)
		}
		if took := time.Since(start); took != time.Hour {
			t.Errorf("Wait returned after %v, want exactly the bucket's refill, 1h", took)
		}

		// The bucket is empty again: a reservation waits an hour.
		r, err := lim.Reserve(ctx, "k", 2*time.Hour)
		if err != nil || !r.OK() || r.Delay != time.Hour {
			t.Fatalf("Reserve = %+v, %v; want a delay of 1h", r, err)
		}
		if err := r.Cancel(ctx); err != nil {
			t.Fatal(err)
		}

		// A Wait whose context ends after 10 minutes returns then, and
		// gives its token back.
		cctx, cancel := context.WithCancel(ctx)
		go func() {
			time.Sleep(10 * time.Minute)
			cancel()
		}()
		start = time.Now()
		if _, err := lim.Wait(cctx, "k"); !errors.Is(err, context.Canceled) {
			t.Errorf("Wait cancelled after 10 minutes = %v, want Canceled", err)
		}
		if took := time.Since(start); took != 10*time.Minute {
			t.Errorf("the cancelled Wait returned after %v, want 10m", took)
		}
		if d, err := lim.Peek(ctx, "k"); err != nil || d.RetryAfter != 50*time.Minute {
			t.Errorf("Peek after the cancelled Wait = %+v, %v; want the token due in 50m (given back)", d, err)
		}

		// A Wait that would outlast its deadline fails at once.
		dctx, dcancel := context.WithTimeout(ctx, time.Minute)
		defer dcancel()
		start = time.Now()
		if _, err := lim.Wait(dctx, "k"); !errors.Is(err, sluice.ErrWaitTooLong) || time.Since(start) != 0 {
			t.Errorf("Wait with a minute's deadline = %v after %v; want ErrWaitTooLong at once", err, time.Since(start))
		}

		// A stack waits for its slowest rule.
		stack, err := sluice.NewStack(s,
			sluice.Rule{Name: "user", Algorithm: algorithms.GCRA, Limit: sluice.PerMinute(1)},
			sluice.Rule{Name: "global", Algorithm: algorithms.TokenBucket, Limit: sluice.PerHour(1)},
		)
		if err != nil {
			t.Fatal(err)
		}
		if v, err := stack.Allow(ctx, "u", "all"); err != nil || !v.Allowed {
			t.Fatalf("Stack.Allow = %+v, %v", v, err)
		}
		start = time.Now()
		if v, err := stack.Wait(ctx, "u", "all"); err != nil || !v.Allowed {
			t.Fatalf("Stack.Wait = %+v, %v", v, err)
		}
		if took := time.Since(start); took != time.Hour {
			t.Errorf("Stack.Wait returned after %v, want the global rule's 1h", took)
		}
	})
	if real := time.Since(began); real > time.Minute {
		t.Errorf("two hours of waits in the bubble took %v of real time", real)
	}
}
