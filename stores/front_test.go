package stores_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores"
)

// recorder decides a front's batches: each request's decision says its
// key's number in Remaining. It records the batches' sizes and how many
// ran at once, and holds each batch until release is closed, if set.
type recorder struct {
	mu       sync.Mutex
	batches  [][]string
	inFlight atomic.Int32
	most     atomic.Int32
	release  chan struct{}
	started  chan struct{} // receives once per batch, if set
}

func (r *recorder) decide(_ context.Context, calls []*core.Call) {
	n := r.inFlight.Add(1)
	for m := r.most.Load(); n > m && !r.most.CompareAndSwap(m, n); m = r.most.Load() {
	}
	if r.started != nil {
		r.started <- struct{}{}
	}
	if r.release != nil {
		<-r.release
	}
	var keys []string
	for _, c := range calls {
		for i, req := range c.Reqs {
			keys = append(keys, req.Key)
			c.Out[i] = core.Decision{Allowed: true, Remaining: int64(len(req.Key))}
		}
	}
	r.mu.Lock()
	r.batches = append(r.batches, keys)
	r.mu.Unlock()
	r.inFlight.Add(-1)
}

func request(key string) core.Request {
	return core.Request{Key: key, Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(1)}}
}

// TestFrontBatches holds the first batch while more calls queue: they go
// together in the next batch, one batch at a time, and each call finds
// its own decisions.
func TestFrontBatches(t *testing.T) {
	synctest.Test(t, testFrontBatches)
}

func testFrontBatches(t *testing.T) {
	r := &recorder{release: make(chan struct{}), started: make(chan struct{}, 100)}
	f := stores.NewFront(r.decide, false)
	var wg sync.WaitGroup
	call := func(key string) {
		d, err := f.Apply(context.Background(), request(key))
		if err != nil || d.Remaining != int64(len(key)) {
			t.Errorf("Apply(%q) = %+v, %v; want its own decision", key, d, err)
		}
	}
	wg.Go(func() { call("first") })
	<-r.started // the first batch is held
	for n := 1; n <= 40; n++ {
		key := string(make([]byte, n))
		wg.Go(func() { call(key) })
	}
	wg.Go(func() {
		reqs := []core.Request{request("ab"), request("abc")}
		out := make([]core.Decision, 2)
		if err := f.ApplyAll(context.Background(), reqs, out); err != nil || out[0].Remaining != 2 || out[1].Remaining != 3 {
			t.Errorf("ApplyAll = %+v, %v; want its own decisions", out, err)
		}
	})
	synctest.Wait() // they have queued
	close(r.release)
	wg.Wait()
	f.Close()
	if len(r.batches) != 2 {
		t.Errorf("%d batches for the held call and the 41 that queued behind it, want 2: %v", len(r.batches), r.batches)
	}
	if m := r.most.Load(); m != 1 {
		t.Errorf("%d batches in flight at once, want 1", m)
	}
}

// TestFrontGaveUp checks that a caller whose context ends returns at once
// with its error, and that its call is not decided if its batch had not
// formed.
func TestFrontGaveUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &recorder{release: make(chan struct{}), started: make(chan struct{}, 10)}
		f := stores.NewFront(r.decide, false)
		go f.Apply(context.Background(), request("held"))
		<-r.started
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		start := time.Now()
		if _, err := f.Apply(ctx, request("late")); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Apply = %v, want the context's deadline", err)
		}
		if took := time.Since(start); took != 20*time.Millisecond {
			t.Errorf("Apply returned after %v, want at its deadline", took)
		}
		close(r.release)
		f.Close()
		for _, b := range r.batches {
			for _, key := range b {
				if key == "late" {
					t.Errorf("the call whose caller gave up was decided")
				}
			}
		}
	})
}

// TestFrontLoneCallerLeavesItsHeldBatch checks that a caller whose own
// batch is held past its deadline (a client holding the call behind a
// dial, whatever its context says) returns at the deadline: the batch is
// decided on the front's goroutine, never the caller's.
func TestFrontLoneCallerLeavesItsHeldBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &recorder{release: make(chan struct{})}
		f := stores.NewFront(r.decide, false)
		const deadline = 50 * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		start := time.Now()
		if _, err := f.Apply(ctx, request("alone")); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Apply = %v, want the context's deadline", err)
		}
		if took := time.Since(start); took != deadline {
			t.Errorf("Apply returned after %v, want at its %v deadline", took, deadline)
		}
		close(r.release)
		f.Close()
	})
}

// TestFrontBatchContext checks the context a batch is decided on: the
// caller's for a batch of one; for several, one that ends when the last
// caller's ends; for a detached front, one that never ends.
func TestFrontBatchContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, detached := range []bool{false, true} {
			got := make(chan context.Context, 1)
			release, started := make(chan struct{}), make(chan struct{}, 1)
			f := stores.NewFront(func(ctx context.Context, calls []*core.Call) {
				started <- struct{}{}
				if len(calls) > 1 {
					got <- ctx
				}
				<-release
				for _, c := range calls {
					c.Out[0] = core.Decision{Allowed: true}
				}
			}, detached)
			go f.Apply(context.Background(), request("held"))
			<-started
			short, cancel1 := context.WithTimeout(context.Background(), 10*time.Millisecond)
			long, cancel2 := context.WithTimeout(context.Background(), 30*time.Millisecond)
			go f.Apply(short, request("short"))
			go f.Apply(long, request("long"))
			synctest.Wait()
			release <- struct{}{} // the held batch ends; the two go together
			<-started
			ctx := <-got
			time.Sleep(20 * time.Millisecond)
			if ctx.Err() != nil {
				t.Errorf("detached %v: the batch's context ended with its first caller's", detached)
			}
			time.Sleep(20 * time.Millisecond)
			if ended := ctx.Err() != nil; ended == detached {
				t.Errorf("detached %v: after both callers' deadlines the batch's context ended: %v", detached, ended)
			}
			close(release)
			f.Close()
			cancel1()
			cancel2()
		}
	})
}

// TestFrontClose checks that Close waits for the batch in flight and that
// calls after it fail with core.ErrClosed.
func TestFrontClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &recorder{release: make(chan struct{}), started: make(chan struct{}, 10)}
		f := stores.NewFront(r.decide, false)
		go f.Apply(context.Background(), request("held"))
		<-r.started
		closed := make(chan struct{})
		go func() { f.Close(); close(closed) }()
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("Close returned with a batch in flight")
		default:
		}
		close(r.release)
		<-closed
		if _, err := f.Apply(context.Background(), request("after")); !errors.Is(err, core.ErrClosed) {
			t.Errorf("Apply after Close = %v, want core.ErrClosed", err)
		}
		if err := f.ApplyAll(context.Background(), []core.Request{request("after")}, make([]core.Decision, 1)); !errors.Is(err, core.ErrClosed) {
			t.Errorf("ApplyAll after Close = %v, want core.ErrClosed", err)
		}
	})
}
