package redisfaults

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/core"
)

// window is when a store call was made and answered.
type window struct{ called, decided time.Time }

// windowKey carries a *window in a context, for timed to fill in.
type windowKey struct{}

// timed records the window of each Apply whose context carries one.
type timed struct{ core.Store }

func (s timed) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	w, _ := ctx.Value(windowKey{}).(*window)
	if w != nil && req.Op == core.OpReserve {
		w.called = time.Now()
	}
	d, err := s.Store.Apply(ctx, req)
	if w != nil && req.Op == core.OpReserve {
		w.decided = time.Now()
	}
	return d, err
}

// CheckShaping bursts 500 requests from 64 goroutines at one key shaped to
// 50/s (burst 1) with a queue of 100, through a Limiter's Wait on store.
//
// What "exactly 100 wait" means: the key admits its one token at once,
// then queues reservations until 100 are owed; every later arrival is
// refused at once (ErrQueueFull) while the line is full, and one place
// comes free every 20ms as the head of the line leaves. So every refused
// request saw exactly 100 waiting: its RetryAfter is more than 100 and at
// most 101 intervals (2s, 2.02s]; every admitted one at most 100
// intervals ahead; and the number admitted is 1 + 100 + the places freed
// during the burst, at most one per 20ms of its duration (plus one).
// Admitted requests leave one at a time, at least 19ms apart.
func CheckShaping(t *testing.T, store core.Store, alg core.Algorithm) {
	t.Helper()
	const (
		requests = 500
		workers  = 64
		queue    = 100
	)
	interval := 20 * time.Millisecond
	lim, err := sluice.NewLimiter(timed{store}, alg, core.PerSecond(50).WithBurst(1))
	if err != nil {
		t.Fatal(err)
	}
	q, err := lim.WithQueue(queue)
	if err != nil {
		t.Fatal(err)
	}
	key := "shaping:" + t.Name()
	ctx := context.Background()
	type result struct {
		d               core.Decision
		err             error
		called, decided time.Time // around the store call
		returned        time.Time
	}
	results := make([]result, requests)
	// 64 goroutines each fire their share of the 500 requests without
	// waiting for the earlier ones: each request is a goroutine of its
	// own, started as soon as the one before it was.
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < requests; i += workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var w window
					d, err := q.Wait(context.WithValue(ctx, windowKey{}, &w), key)
					results[i] = result{d, err, w.called, w.decided, time.Now()}
				}()
			}
		}()
	}
	wg.Wait()
	var releases []time.Time
	refused := 0
	for i, r := range results {
		switch {
		case r.err == nil:
			releases = append(releases, r.returned)
			if r.d.Delay > queue*interval {
				t.Errorf("request %d admitted with a delay of %v; the line holds at most %v", i, r.d.Delay, queue*interval)
			}
		case errors.Is(r.err, sluice.ErrQueueFull):
			refused++
			if r.d.RetryAfter <= queue*interval || r.d.RetryAfter > (queue+1)*interval {
				t.Errorf("request %d refused with RetryAfter %v; want (%v, %v]: exactly %d waiting", i, r.d.RetryAfter, queue*interval, (queue+1)*interval, queue)
			}
		default:
			t.Fatalf("request %d: %v", i, r.err)
		}
	}
	// The burst lasts until its last decision, refused or admitted: on a
	// loaded machine the requests arrive spread out, and a place that
	// came free before the last of them was decided is taken.
	var span time.Duration
	for _, r := range results {
		span = max(span, r.decided.Sub(start))
	}
	admitted := len(releases)
	most := 1 + queue + int(span/interval) + 1
	t.Logf("%d admitted (1 at once, %d waited), %d refused at once; the burst was decided within %v", admitted, admitted-1, refused, span)
	if admitted < 1+queue || admitted > most {
		t.Errorf("%d admitted; want 1 + %d queued + at most one freed place per %v of the %v burst: %d to %d", admitted, queue, interval, span, 1+queue, most)
	}
	// Each waiter was told to leave on one grid of 20ms: the instant its
	// reservation was decided plus its Delay (rounded up to a µs) is
	// t0 + k × 20ms for the k-th in line, whatever the clocks. A decision
	// lies within its store call, so one t0 must fit every call's window.
	var admitted2 []result
	for _, r := range results {
		if r.err == nil {
			admitted2 = append(admitted2, r)
		}
	}
	slices.SortFunc(admitted2, func(a, b result) int { return cmp.Compare(a.d.Delay, b.d.Delay) })
	for k := 1; k < len(admitted2); k++ {
		if d, prev := admitted2[k].d.Delay, admitted2[k-1].d.Delay; d-prev < interval-span-time.Millisecond {
			t.Errorf("waiters %d and %d were given delays %v and %v: less than %v apart, less the %v burst", k-1, k, prev, d, interval, span)
		}
	}
	rels := make([]Release, len(admitted2))
	for k, r := range admitted2 {
		rels[k] = Release{Called: r.called, Decided: r.decided, Delay: r.d.Delay}
	}
	restarts, fit, err := CheckGrid(rels, interval)
	if err != nil {
		t.Error(err)
	}
	if restarts > 0 {
		t.Logf("the line emptied and started again %d times: the process stalled between decisions", restarts)
	}
	// When they woke is up to the scheduler: logged, not asserted (a
	// loaded machine wakes timers late, in bunches).
	slices.SortFunc(releases, func(a, b time.Time) int { return a.Compare(b) })
	minGap := time.Hour
	for i := 1; i < len(releases); i++ {
		minGap = min(minGap, releases[i].Sub(releases[i-1]))
	}
	t.Logf("release grid fits within %v; the shortest gap between wake-ups was %v", fit, minGap)

	// A waiter that gives up is refunded, and the next arrival takes its
	// place. At a token every 10s with a line of 3, nothing leaves during
	// the test.
	slow, err := sluice.NewLimiter(store, alg, core.Every(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	line, _ := slow.WithQueue(3)
	key += ":cancel"
	if d, err := line.Wait(ctx, key); err != nil || d.Delay != 0 {
		t.Fatalf("first Wait = %+v, %v; want at once", d, err)
	}
	type waiting struct {
		cancel context.CancelFunc
		err    chan error
	}
	var waiters []waiting
	enqueue := func() waiting {
		wctx, cancel := context.WithCancel(ctx)
		w := waiting{cancel, make(chan error, 1)}
		go func() {
			_, err := line.Wait(wctx, key)
			w.err <- err
		}()
		// In line once the debt shows.
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
			if d, _ := slow.Peek(ctx, key); d.RetryAfter > time.Duration(len(waiters)+1)*10*time.Second+5*time.Second {
				break
			}
		}
		waiters = append(waiters, w)
		return w
	}
	for range 3 {
		enqueue()
	}
	if _, err := line.Wait(ctx, key); !errors.Is(err, sluice.ErrQueueFull) {
		t.Fatalf("a 4th waiter = %v; want ErrQueueFull", err)
	}
	waiters[1].cancel()
	if err := <-waiters[1].err; !errors.Is(err, context.Canceled) || errors.Is(err, core.ErrCleanup) {
		t.Fatalf("the cancelled waiter = %v; want context.Canceled, refunded", err)
	}
	waiters = slices.Delete(waiters, 1, 2)
	// The next arrival moves up into the freed place, at the end of the
	// line; the one after it is refused.
	r, err := line.Reserve(ctx, key, time.Minute)
	if err != nil || !r.OK() || r.Delay <= 20*time.Second || r.Delay > 30*time.Second {
		t.Fatalf("the next arrival = %+v, %v; want a place in line, 20s to 30s away", r, err)
	}
	if _, err := line.Wait(ctx, key); !errors.Is(err, sluice.ErrQueueFull) {
		t.Fatalf("the arrival after it = %v; want ErrQueueFull", err)
	}
	if err := r.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	for _, w := range waiters {
		w.cancel()
		if err := <-w.err; !errors.Is(err, context.Canceled) {
			t.Errorf("waiter = %v", err)
		}
	}
}
