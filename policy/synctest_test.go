package policy_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/stores/memstore"
	"github.com/sluicehq/sluice/stores/storetest"
)

// TestSynctestBreaker checks that a breaker keeps a testing/synctest
// bubble's time, with a storetest.Faulty for the store's faults: the
// circuit opens on an outage, answers fail-closed with the wait to its
// next probe without calling the store, half-opens after its open
// timeout, and closes on its probes; a blackholed call returns at the
// per-call deadline. An hour's open timeout takes no real time.
func TestSynctestBreaker(t *testing.T) {
	t.Parallel()
	began := time.Now()
	synctest.Test(t, func(t *testing.T) {
		mem, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		f := storetest.NewFaulty(mem)
		var changes []string
		b, err := policy.NewBreaker(f, policy.WithMode(policy.FailClosed), policy.WithOpenTimeout(time.Hour),
			policy.WithTimeout(50*time.Millisecond),
			policy.WithOnChange(func(c policy.Change) { changes = append(changes, fmt.Sprintf("%v>%v", c.From, c.To)) }))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() }) // closes f and the memstore
		lim, err := sluice.NewLimiter(b, algorithms.TokenBucket, core.PerSecond(100))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		allow := func(what string, want core.Source) core.Decision {
			t.Helper()
			d, err := lim.Allow(ctx, "k")
			if err != nil || d.Source != want || d.Allowed != (want == core.SourceStore) {
				t.Fatalf("%s: Allow = %+v, %v; want from %v", what, d, err, want)
			}
			return d
		}

		// A new breaker gives calls its ceiling for a tenth of its
		// window (a cold client connects); then a blackholed call
		// returns by the per-call deadline, fail-closed.
		time.Sleep(policy.DefaultWindow / 10)
		release := f.Blackhole()
		start := time.Now()
		allow("blackholed", core.SourceFailClosed)
		if took := time.Since(start); took > 50*time.Millisecond || took < 50*time.Millisecond*15/16 {
			t.Errorf("a blackholed call returned after %v, want the per-call deadline, 50ms", took)
		}
		release()

		// Nor does a new circuit trip within that tenth.
		f.Fail(storetest.ErrOutage)
		for i := 0; b.State() != policy.Open; i++ {
			if i == policy.DefaultMinFailures {
				t.Fatalf("still %v after %d failures", b.State(), i)
			}
			allow(fmt.Sprint("failure ", i+1), core.SourceFailClosed)
		}
		opened, calls := time.Now(), len(f.Calls())
		time.Sleep(59 * time.Minute)
		d := allow("open", core.SourceFailClosed)
		if d.RetryAfter != time.Minute {
			t.Errorf("open: RetryAfter %v, want the minute left to the next probe", d.RetryAfter)
		}
		if n := len(f.Calls()); n != calls {
			t.Errorf("%d calls reached the store while the circuit was open", n-calls)
		}

		// The circuit lets probes through once the open timeout has
		// passed: just after the instant RetryAfter names.
		time.Sleep(d.RetryAfter + time.Millisecond)
		if since := time.Since(opened); since != time.Hour+time.Millisecond {
			t.Errorf("probing %v after the circuit opened, want 1h1ms", since)
		}
		f.Heal()
		for i := range policy.DefaultProbes {
			allow(fmt.Sprint("probe ", i+1), core.SourceStore)
		}
		if b.State() != policy.Closed {
			t.Errorf("state %v after %d successful probes, want closed", b.State(), policy.DefaultProbes)
		}
		if want := []string{"closed>open", "open>half-open", "half-open>closed"}; !slices.Equal(changes, want) {
			t.Errorf("changes %q, want %q", changes, want)
		}
	})
	if real := time.Since(began); real > time.Minute {
		t.Errorf("an hour's outage in the bubble took %v of real time", real)
	}
}

// TestWaitWhileDown checks that a Wait answered by the failure policy
// says so: fail-closed fails with core.ErrUnavailable naming the mode,
// however long the context has left, and not with ErrWaitTooLong, which
// blames the deadline; a degraded denial keeps its error and names the
// local fallback. Virtual time: the breaker's timers are the bubble's.
func TestWaitWhileDown(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode     policy.Mode
		is, isnt error
		says     string
	}{
		{policy.FailClosed, core.ErrUnavailable, sluice.ErrWaitTooLong, "fail-closed"},
		{policy.Degrade, sluice.ErrWaitTooLong, core.ErrUnavailable, "degraded"},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				mem, err := memstore.New(memstore.Config{})
				if err != nil {
					t.Fatal(err)
				}
				f := storetest.NewFaulty(mem)
				local, err := memstore.New(memstore.Config{})
				if err != nil {
					t.Fatal(err)
				}
				b, err := policy.NewBreaker(f, policy.WithMode(tc.mode), policy.WithLocal(local), policy.WithOpenTimeout(time.Hour))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { b.Close() })
				// A burst of 1 at 1/s: the second wait needs a second.
				lim, err := sluice.NewLimiter(b, algorithms.TokenBucket, core.PerSecond(1))
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				time.Sleep(policy.DefaultWindow / 10) // past the breaker's cold start
				f.Fail(storetest.ErrOutage)
				for i := 0; b.State() != policy.Open; i++ {
					if i > 100 {
						t.Fatalf("still %v after %d failures", b.State(), i)
					}
					lim.Allow(ctx, fmt.Sprint("trip", i))
				}
				lim.Allow(ctx, "k") // the degraded fallback's burst is spent
				wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				defer cancel()
				_, err = lim.Wait(wctx, "k")
				if !errors.Is(err, tc.is) || errors.Is(err, tc.isnt) || !strings.Contains(err.Error(), tc.says) {
					t.Errorf("Wait with 300ms left = %v; want %v, not %v, naming %q", err, tc.is, tc.isnt, tc.says)
				}
				if testing.Verbose() {
					t.Log(err)
				}
			})
		})
	}
}
