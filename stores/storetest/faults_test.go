package storetest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/stores/memstore"
	"github.com/sluicehq/sluice/stores/storetest"
)

// newMem returns a memstore without a sweeper, closed when the test ends.
func newMem(t *testing.T) *memstore.Store {
	t.Helper()
	s, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// newFaulty returns a Faulty over a Counter over a memstore, closed when
// the test ends: the Counter tells what reached the store.
func newFaulty(t *testing.T) (*storetest.Faulty, *storetest.Counter) {
	t.Helper()
	c := storetest.NewCounter(newMem(t))
	f := storetest.NewFaulty(c)
	t.Cleanup(func() { f.Close() })
	return f, c
}

// reached returns how many calls reached the Counter.
func reached(c *storetest.Counter) int64 {
	apply, all, reset := c.Counts()
	return apply + all + reset
}

var (
	tb    = core.Request{Key: "k", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerHour(10)}}
	batch = []core.Request{
		{Key: "alice", Cost: 1, Terms: &core.Terms{Algorithm: core.Named(algorithms.TokenBucket, "user"), Limit: core.PerHour(10)}},
		{Key: "all", Cost: 1, Terms: &core.Terms{Algorithm: core.Named(algorithms.GCRA, "global"), Limit: core.PerHour(100)}},
	}
)

// TestFaultyConformance runs the conformance suite through a Faulty
// without faults: it forwards every call unchanged.
func TestFaultyConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) core.Store {
		s, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return storetest.NewFaulty(s)
	})
}

// TestFaultyFailNext checks that FailNext fails the next n calls of every
// method with the error as given, without reaching the store, zeroing an
// ApplyAll's decisions, and that later calls are forwarded.
func TestFaultyFailNext(t *testing.T) {
	t.Parallel()
	f, c := newFaulty(t)
	ctx := context.Background()
	errX := errors.New("x")
	f.FailNext(3, errX)
	if d, err := f.Apply(ctx, tb); err != errX || d != (core.Decision{}) {
		t.Errorf("call 1: Apply = %+v, %v; want the zero decision and the error as given", d, err)
	}
	out := []core.Decision{{Allowed: true}, {Allowed: true}}
	if err := f.ApplyAll(ctx, batch, out); err != errX || out[0] != (core.Decision{}) || out[1] != (core.Decision{}) {
		t.Errorf("call 2: ApplyAll = %v, out %+v; want the error and zeroed decisions", err, out)
	}
	if err := f.Reset(ctx, "k", algorithms.TokenBucket); err != errX {
		t.Errorf("call 3: Reset = %v, want the error", err)
	}
	if n := reached(c); n != 0 {
		t.Errorf("%d failed calls reached the store, want none", n)
	}
	if d, err := f.Apply(ctx, tb); err != nil || !d.Allowed || d.Remaining != 9 {
		t.Errorf("call 4: Apply = %+v, %v; want forwarded and allowed, 9 left", d, err)
	}
	if apply, _, _ := c.Counts(); apply != 1 {
		t.Errorf("%d Apply calls reached the store, want 1", apply)
	}
	// A new FailNext replaces the count; FailNext(0, nil) cancels it.
	f.FailNext(5, errX)
	f.FailNext(1, storetest.ErrOutage)
	if _, err := f.Apply(ctx, tb); err != storetest.ErrOutage {
		t.Errorf("after FailNext(5) then FailNext(1): %v, want ErrOutage", err)
	}
	if _, err := f.Apply(ctx, tb); err != nil {
		t.Errorf("the call after the replacing count: %v, want forwarded", err)
	}
	f.FailNext(2, errX)
	f.FailNext(0, nil)
	if _, err := f.Apply(ctx, tb); err != nil {
		t.Errorf("after FailNext(0, nil): %v, want forwarded", err)
	}
}

// TestFaultyFail checks an outage that lasts until Fail(nil) or Heal, and
// that FailNext's count comes first.
func TestFaultyFail(t *testing.T) {
	t.Parallel()
	f, c := newFaulty(t)
	ctx := context.Background()
	errX := errors.New("x")
	f.Fail(storetest.ErrOutage)
	f.FailNext(1, errX)
	want := []error{errX, storetest.ErrOutage, storetest.ErrOutage, storetest.ErrOutage}
	for i, w := range want {
		if _, err := f.Apply(ctx, tb); err != w {
			t.Errorf("call %d: %v, want %v", i+1, err, w)
		}
	}
	f.Fail(nil)
	if _, err := f.Apply(ctx, tb); err != nil {
		t.Errorf("after Fail(nil): %v, want forwarded", err)
	}
	f.Fail(errX)
	f.FailNext(3, errX)
	f.SetLatency(time.Hour)
	release := f.Blackhole()
	f.Heal()
	if d, err := f.Apply(ctx, tb); err != nil || !d.Allowed {
		t.Errorf("after Heal: %+v, %v; want forwarded at once", d, err)
	}
	release() // a release after Heal is harmless
	if n := reached(c); n != 2 {
		t.Errorf("%d calls reached the store, want 2", n)
	}
}

// TestFaultyOutageClassified checks that ErrOutage is a store failure for
// policy.IsStoreFailure and a breaker, and that another injected error is
// the request's: the breaker answers the first by its mode and returns
// the second.
func TestFaultyOutageClassified(t *testing.T) {
	t.Parallel()
	if !policy.IsStoreFailure(storetest.ErrOutage) || !errors.Is(storetest.ErrOutage, core.ErrUnavailable) {
		t.Errorf("ErrOutage is not a store failure")
	}
	f, _ := newFaulty(t)
	b, err := policy.NewBreaker(f, policy.WithMode(policy.FailClosed))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() }) // its stall meter ends with it; f's Close is idempotent
	ctx := context.Background()
	f.FailNext(1, storetest.ErrOutage)
	if d, err := b.Apply(ctx, tb); err != nil || d.Source != core.SourceFailClosed {
		t.Errorf("ErrOutage through a fail-closed breaker = %+v, %v; want denied, fail-closed", d, err)
	}
	errX := errors.New("x")
	f.FailNext(1, errX)
	if d, err := b.Apply(ctx, tb); !errors.Is(err, errX) {
		t.Errorf("a plain error through a breaker = %+v, %v; want the error", d, err)
	}
	if c := b.Counts(); c.Failures != 1 {
		t.Errorf("breaker counts %+v; want 1 failure (ErrOutage), the plain error uncounted", c)
	}
}

// TestFaultyLatencySynctest checks in a bubble that a call waits exactly
// the latency before it is forwarded, or fails when its context ends
// first, without reaching the store; and that the bubble's hour takes no
// real time.
func TestFaultyLatencySynctest(t *testing.T) {
	t.Parallel()
	began := time.Now()
	synctest.Test(t, func(t *testing.T) {
		f, c := newFaulty(t)
		f.SetLatency(time.Hour)
		start := time.Now()
		d, err := f.Apply(context.Background(), tb)
		if took := time.Since(start); took != time.Hour || err != nil || !d.Allowed {
			t.Errorf("Apply with an hour's latency = %+v, %v after %v; want allowed after 1h", d, err, took)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		start = time.Now()
		err = f.ApplyAll(ctx, batch, make([]core.Decision, 2))
		if took := time.Since(start); took != time.Minute || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("ApplyAll with a minute's deadline = %v after %v; want DeadlineExceeded after 1m", err, took)
		}
		if n := reached(c); n != 1 {
			t.Errorf("%d calls reached the store, want 1", n)
		}
		if calls := f.Calls(); len(calls) != 2 || calls[1].Forwarded || !calls[1].Done {
			t.Errorf("calls %+v; want the second done and not forwarded", calls)
		}
	})
	if real := time.Since(began); real > time.Minute {
		t.Errorf("an hour and a minute of latency took %v of real time", real)
	}
}

// TestFaultyBlackholeSynctest checks in a bubble that blackholed calls
// wait until released, their context ends or the Faulty closes, and that
// released calls go on through the faults in force.
func TestFaultyBlackholeSynctest(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f, c := newFaulty(t)
		release := f.Blackhole()
		if again := f.Blackhole(); again == nil {
			t.Fatal("Blackhole returned a nil release")
		}
		ctx := context.Background()
		results := make(chan error, 3)
		for range 2 {
			go func() {
				_, err := f.Apply(ctx, tb)
				results <- err
			}()
		}
		go func() {
			tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			start := time.Now()
			_, err := f.Apply(tctx, tb)
			if took := time.Since(start); took != 10*time.Second {
				t.Errorf("a blackholed call with a 10 s deadline returned after %v", took)
			}
			results <- err
		}()
		synctest.Wait()
		if h := f.Held(); h != 3 {
			t.Fatalf("Held() = %d, want 3", h)
		}
		if calls := f.Calls(); len(calls) != 3 || calls[0].Done {
			t.Fatalf("Calls() = %+v; want 3 under way", calls)
		}
		time.Sleep(10 * time.Second)
		if err := <-results; !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("the call with a deadline: %v, want DeadlineExceeded", err)
		}
		if h := f.Held(); h != 2 {
			t.Errorf("Held() = %d after the deadline, want 2", h)
		}
		// Released, the first call meets the failure set meanwhile, the
		// second is forwarded.
		f.FailNext(1, storetest.ErrOutage)
		release()
		errs := []error{<-results, <-results}
		if !slices.Contains(errs, storetest.ErrOutage) || !slices.Contains(errs, nil) {
			t.Errorf("released calls: %v; want one ErrOutage and one forwarded", errs)
		}
		if n := reached(c); n != 1 {
			t.Errorf("%d calls reached the store, want 1", n)
		}
		// Close fails the calls in a blackhole with ErrClosed.
		f.Blackhole()
		go func() {
			_, err := f.Apply(ctx, tb)
			results <- err
		}()
		synctest.Wait()
		f.Close()
		if err := <-results; !errors.Is(err, core.ErrClosed) {
			t.Errorf("a blackholed call at Close: %v, want ErrClosed", err)
		}
	})
}

// closeCounter is a store that counts its Close calls and fails them.
type closeCounter struct {
	core.Store
	closes atomic.Int64
}

var errClose = errors.New("close failed")

func (c *closeCounter) Close() error { c.closes.Add(1); return errClose }

// TestFaultyClose checks that Close closes the wrapped store once and
// returns its error every time, and that later calls fail with ErrClosed
// without reaching it.
func TestFaultyClose(t *testing.T) {
	t.Parallel()
	inner := &closeCounter{Store: storetest.NewCounter(newMem(t))}
	f := storetest.NewFaulty(inner)
	if f.Unwrap() != inner {
		t.Errorf("Unwrap is not the wrapped store")
	}
	for i := range 2 {
		if err := f.Close(); err != errClose {
			t.Errorf("Close %d = %v, want the store's error", i+1, err)
		}
	}
	if n := inner.closes.Load(); n != 1 {
		t.Errorf("the store was closed %d times, want once", n)
	}
	ctx := context.Background()
	_, err1 := f.Apply(ctx, tb)
	err2 := f.ApplyAll(ctx, batch, make([]core.Decision, 2))
	err3 := f.Reset(ctx, "k", algorithms.TokenBucket)
	for i, err := range []error{err1, err2, err3} {
		if !errors.Is(err, core.ErrClosed) {
			t.Errorf("method %d after Close: %v, want ErrClosed", i, err)
		}
	}
	if n := reached(inner.Store.(*storetest.Counter)); n != 0 {
		t.Errorf("%d calls after Close reached the store, want none", n)
	}
}

// TestFaultyRecords checks what Calls and Requests record: every method,
// copies of batches and decisions, errors, and what was forwarded.
func TestFaultyRecords(t *testing.T) {
	t.Parallel()
	f, _ := newFaulty(t)
	ctx := context.Background()
	f.Apply(ctx, tb)
	reqs := slices.Clone(batch)
	out := make([]core.Decision, 2)
	if err := f.ApplyAll(ctx, reqs, out); err != nil {
		t.Fatal(err)
	}
	reqs[0].Key, out[0].Remaining = "changed", -1 // the record is a copy
	f.FailNext(1, storetest.ErrOutage)
	f.Apply(ctx, tb)
	f.Reset(ctx, "k", algorithms.TokenBucket)

	calls := f.Calls()
	var got []string
	for _, c := range calls {
		got = append(got, fmt.Sprintf("%s %d reqs, %d decisions, forwarded %v, done %v, err %v",
			c.Method, len(c.Requests), len(c.Decisions), c.Forwarded, c.Done, c.Err))
	}
	want := []string{
		"Apply 1 reqs, 1 decisions, forwarded true, done true, err <nil>",
		"ApplyAll 2 reqs, 2 decisions, forwarded true, done true, err <nil>",
		"Apply 1 reqs, 0 decisions, forwarded false, done true, err " + storetest.ErrOutage.Error(),
		"Reset 1 reqs, 0 decisions, forwarded true, done true, err <nil>",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Calls():\n%q\nwant\n%q", got, want)
	}
	if c := calls[1]; c.Requests[0].Key != "alice" || c.Decisions[0].Remaining != 9 || !c.Decisions[1].Allowed {
		t.Errorf("the batch's record %+v; want alice's request and 9 left, unchanged by the caller", c)
	}
	if c := calls[3]; c.Requests[0].Key != "k" || c.Requests[0].Algorithm != algorithms.TokenBucket {
		t.Errorf("the Reset's record %+v; want its key and algorithm", c.Requests[0])
	}
	calls[0].Requests[0].Key = "mutated" // Calls returns copies
	var keys []string
	for _, r := range f.Requests() {
		keys = append(keys, r.Key)
	}
	if want := []string{"k", "alice", "all", "k"}; !slices.Equal(keys, want) {
		t.Errorf("Requests() keys %q, want %q (Apply, the batch, the failed Apply; no Reset)", keys, want)
	}
}

// TestFaultyConcurrentSafe hammers a Faulty from 64 goroutines while
// another changes its faults a hundred times over: every call is recorded
// once, and the calls recorded as forwarded are the calls the store saw.
func TestFaultyConcurrentSafe(t *testing.T) {
	t.Parallel()
	f, c := newFaulty(t)
	ctx := context.Background()
	const goroutines, cycles = 64, 100
	stop := make(chan struct{})
	var made atomic.Int64 // calls made, batches as one
	var callers sync.WaitGroup
	for g := range goroutines {
		callers.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				req := tb
				req.Key = fmt.Sprint("k", g, ":", i%5)
				if i%2 == 0 {
					f.Apply(ctx, req)
				} else {
					f.ApplyAll(ctx, batch, make([]core.Decision, 2))
				}
				made.Add(1)
			}
		})
	}
	for range cycles {
		f.FailNext(3, storetest.ErrOutage)
		f.SetLatency(time.Microsecond)
		release := f.Blackhole()
		time.Sleep(100 * time.Microsecond)
		release()
		time.Sleep(100 * time.Microsecond)
		f.Heal()
	}
	close(stop)
	callers.Wait()
	calls := f.Calls()
	if int64(len(calls)) != made.Load() {
		t.Fatalf("%d calls recorded, %d made", len(calls), made.Load())
	}
	var forwarded, failed, requests int64
	for _, call := range calls {
		requests += int64(len(call.Requests))
		switch {
		case !call.Done:
			t.Fatalf("a call not done after every caller returned: %+v", call)
		case call.Forwarded:
			forwarded++
		case call.Err == storetest.ErrOutage:
			failed++
		default:
			t.Fatalf("a call neither forwarded nor failed by a fault: %+v", call)
		}
	}
	if n := reached(c); n != forwarded {
		t.Errorf("%d calls reached the store, %d recorded as forwarded", n, forwarded)
	}
	if failed == 0 || forwarded == 0 {
		t.Errorf("%d failed and %d forwarded: the faults did not interleave with the calls", failed, forwarded)
	}
	if n := int64(len(f.Requests())); n != requests {
		t.Errorf("Requests() holds %d requests, the calls %d", n, requests)
	}
}

// TestFaultyArguments checks what arguments outside the usual ranges do:
// a documented behaviour each, never a panic.
func TestFaultyArguments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	req := core.Request{Key: "k", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(10)}}
	if _, err := storetest.NewFaulty(nil).Apply(ctx, req); !errors.Is(err, core.ErrNoStore) {
		t.Errorf("NewFaulty(nil).Apply: %v, want core.ErrNoStore", err)
	}
	f, _ := newFaulty(t)
	f.FailNext(1, nil)
	if _, err := f.Apply(ctx, req); !errors.Is(err, storetest.ErrOutage) {
		t.Errorf("after FailNext(1, nil): %v, want ErrOutage", err)
	}
	f.FailNext(-1, storetest.ErrOutage)
	f.SetLatency(-time.Second)
	if _, err := f.Apply(ctx, req); err != nil {
		t.Errorf("after FailNext(-1, …) and SetLatency(-1s): %v, want no fault", err)
	}
}
