package rueidisstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redisfaults"
)

// TestShaping runs the shaping scenario of core/shaping_test.go and
// stores/redisstore/shaping_test.go through rueidis: the queue is the
// key's debt in Redis, bounded in the script. Those tests live in
// packages of their own, so this is a smaller copy: the burst's counts,
// waits and release grid, and a cancelled waiter's refund.
func TestShaping(t *testing.T) {
	store := newStore(t, newClient(t, testAddr(t)))
	for _, alg := range []core.Algorithm{algorithms.GCRA, algorithms.TokenBucket} {
		t.Run(alg.Name(), func(t *testing.T) {
			runShapingBurst(t, store, alg)
			runShapingCancel(t, store, alg)
		})
	}
}

// shapeResult is one Wait of the burst, and the window of its store call.
type shapeResult struct {
	d               core.Decision
	err             error
	called, decided time.Time
}

// windowRecorder records, by a context value, the window of each
// reservation's store call.
type windowRecorder struct{ core.Store }

// resultKey carries a *shapeResult in a context, for windowRecorder.
type resultKey struct{}

func (s windowRecorder) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	r, _ := ctx.Value(resultKey{}).(*shapeResult)
	if r == nil || req.Op != core.OpReserve {
		return s.Store.Apply(ctx, req)
	}
	r.called = time.Now()
	d, err := s.Store.Apply(ctx, req)
	r.decided = time.Now()
	return d, err
}

// runShapingBurst bursts 500 Waits, each a goroutine, at one key shaped
// to 50/s (burst 1) with a queue of 100. As in core's test: every refused
// request saw exactly 100 waiting (RetryAfter in (2 s, 2.02 s]); every
// admitted one waited at most 100 intervals; 1 + 100 + at most one freed
// place per 20 ms of the burst, plus one, were admitted; and their
// release instants (decision plus Delay) lie on one 20 ms grid.
func runShapingBurst(t *testing.T, store core.Store, alg core.Algorithm) {
	const (
		requests = 500
		queue    = 100
		interval = 20 * time.Millisecond
	)
	lim, err := core.NewLimiter(windowRecorder{store}, alg, core.PerSecond(50).WithBurst(1))
	if err != nil {
		t.Fatal(err)
	}
	line, err := lim.WithQueue(queue)
	if err != nil {
		t.Fatal(err)
	}
	key := "shaping:" + t.Name()
	results := make([]shapeResult, requests)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range results {
		wg.Go(func() {
			r := &results[i]
			r.d, r.err = line.Wait(context.WithValue(context.Background(), resultKey{}, r), key)
		})
	}
	wg.Wait()
	var admitted []shapeResult
	var span time.Duration // from the start to the last refusal
	for i, r := range results {
		switch {
		case r.err == nil:
			admitted = append(admitted, r)
			if r.d.Delay > queue*interval {
				t.Errorf("request %d admitted with a delay of %v; the line holds at most %v", i, r.d.Delay, queue*interval)
			}
		case errors.Is(r.err, core.ErrQueueFull):
			span = max(span, r.decided.Sub(start))
			if r.d.RetryAfter <= queue*interval || r.d.RetryAfter > (queue+1)*interval {
				t.Errorf("request %d refused with RetryAfter %v; want (%v, %v]: exactly %d waiting", i, r.d.RetryAfter, queue*interval, (queue+1)*interval, queue)
			}
		default:
			t.Fatalf("request %d: %v", i, r.err)
		}
	}
	most := 1 + queue + int(span/interval) + 1
	t.Logf("%d admitted, %d refused at once; the burst was decided within %v", len(admitted), requests-len(admitted), span)
	if len(admitted) < 1+queue || len(admitted) > most {
		t.Errorf("%d admitted; want 1 + %d queued + at most one freed place per %v of the %v burst: %d to %d", len(admitted), queue, interval, span, 1+queue, most)
	}
	// In line by scheduled instant, the k-th at t0 + k × 20 ms: one t0
	// must fit every store call's window.
	rels := make([]redisfaults.Release, len(admitted))
	for k, r := range admitted {
		rels[k] = redisfaults.Release{Called: r.called, Decided: r.decided, Delay: r.d.Delay}
	}
	restarts, fit, err := redisfaults.CheckGrid(rels, interval)
	if err != nil {
		t.Error(err)
	}
	t.Logf("release grid fits within %v; the line started again %d times (the process stalled between decisions)", fit, restarts)
}

// runShapingCancel fills a line of 3 at a token every 10 s, cancels the
// middle waiter, and checks that the next arrival takes its place at the
// end of the line and the one after it is refused.
func runShapingCancel(t *testing.T, store core.Store, alg core.Algorithm) {
	ctx := context.Background()
	slow, err := core.NewLimiter(store, alg, core.Every(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	line, _ := slow.WithQueue(3)
	key := "shaping:" + t.Name() + ":cancel"
	if d, err := line.Wait(ctx, key); err != nil || d.Delay != 0 {
		t.Fatalf("first Wait = %+v, %v; want at once", d, err)
	}
	var cancels []context.CancelFunc
	var done []chan error
	for i := range 3 {
		wctx, cancel := context.WithCancel(ctx)
		ch := make(chan error, 1)
		go func() {
			_, err := line.Wait(wctx, key)
			ch <- err
		}()
		cancels, done = append(cancels, cancel), append(done, ch)
		// In line once the debt shows: the i+1-th waiter owes 10 s more.
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(2 * time.Millisecond) {
			if d, _ := slow.Peek(ctx, key); d.RetryAfter > time.Duration(i+1)*10*time.Second+5*time.Second {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("waiter %d not in line within 5 s", i)
			}
		}
	}
	if _, err := line.Wait(ctx, key); !errors.Is(err, core.ErrQueueFull) {
		t.Fatalf("a 4th waiter = %v; want ErrQueueFull", err)
	}
	cancels[1]()
	if err := <-done[1]; !errors.Is(err, context.Canceled) || errors.Is(err, core.ErrCleanup) {
		t.Fatalf("the cancelled waiter = %v; want context.Canceled, refunded", err)
	}
	r, err := line.Reserve(ctx, key, time.Minute)
	if err != nil || !r.OK() || r.Delay <= 20*time.Second || r.Delay > 30*time.Second {
		t.Fatalf("the next arrival = %+v, %v; want a place in line, 20 s to 30 s away", r, err)
	}
	if _, err := line.Wait(ctx, key); !errors.Is(err, core.ErrQueueFull) {
		t.Errorf("the arrival after it = %v; want ErrQueueFull", err)
	}
	if err := r.Cancel(ctx); err != nil {
		t.Error(err)
	}
	for _, i := range []int{0, 2} { // 1 has returned
		cancels[i]()
		if err := <-done[i]; !errors.Is(err, context.Canceled) {
			t.Errorf("waiter %d = %v", i, err)
		}
	}
}
