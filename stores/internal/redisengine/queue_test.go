package redisengine_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores/internal/redisengine"
)

// recorder is a Send that records its rounds and how many ran at once,
// and holds each round until release is closed, if it is set.
type recorder struct {
	mu       sync.Mutex
	rounds   [][]int
	inFlight atomic.Int32
	most     atomic.Int32
	release  chan struct{}
	started  chan struct{} // receives once per round, if set
}

func (r *recorder) send(round []*redisengine.Entry) {
	n := r.inFlight.Add(1)
	for {
		m := r.most.Load()
		if n <= m || r.most.CompareAndSwap(m, n) {
			break
		}
	}
	if r.started != nil {
		r.started <- struct{}{}
	}
	if r.release != nil {
		<-r.release
	}
	ids := make([]int, len(round))
	for i, c := range round {
		ids[i] = *c.Item.(*int)
		*c.Item.(*int) = -ids[i] // the result: the id, negated
	}
	r.mu.Lock()
	r.rounds = append(r.rounds, ids)
	r.mu.Unlock()
	r.inFlight.Add(-1)
}

// TestRounds holds the first round while more calls queue: they go
// together in the next rounds, at most Senders at once, and each call
// finds its own result.
func TestRounds(t *testing.T) {
	r := &recorder{release: make(chan struct{}), started: make(chan struct{}, 100)}
	q := &redisengine.Queue{Send: r.send, Senders: 2}
	var wg sync.WaitGroup
	call := func(id int) {
		item := id
		c := &redisengine.Entry{Item: &item}
		if err := q.Do(context.Background(), c); err != nil {
			t.Errorf("call %d: %v", id, err)
		}
		if item != -id {
			t.Errorf("call %d: result %d, want %d", id, item, -id)
		}
	}
	wg.Go(func() { call(1) })
	<-r.started // the first round is held
	for id := 2; id <= 41; id++ {
		wg.Go(func() { call(id) })
	}
	time.Sleep(50 * time.Millisecond) // let them queue
	close(r.release)
	wg.Wait()
	q.Close()
	calls, rounds := 0, len(r.rounds)
	for _, b := range r.rounds {
		calls += len(b)
	}
	if calls != 41 {
		t.Errorf("%d calls sent, want 41", calls)
	}
	if rounds >= 41 {
		t.Errorf("%d rounds for 41 calls: none were gathered", rounds)
	}
	if m := r.most.Load(); m > 2 {
		t.Errorf("%d rounds in flight at once, want at most 2", m)
	}
	t.Logf("41 calls in %d rounds, at most %d at once", rounds, r.most.Load())
}

// TestGaveUp checks that a caller whose context ends returns at once with
// its error, and that its call is not sent if its round had not left.
func TestGaveUp(t *testing.T) {
	r := &recorder{release: make(chan struct{}), started: make(chan struct{}, 10)}
	q := &redisengine.Queue{Send: r.send, Senders: 1}
	held := 1
	go q.Do(context.Background(), &redisengine.Entry{Item: &held})
	<-r.started
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	late := 2
	start := time.Now()
	err := q.Do(ctx, &redisengine.Entry{Item: &late})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Do = %v, want the context's deadline", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("Do returned after %v", took)
	}
	close(r.release)
	q.Close()
	for _, b := range r.rounds {
		for _, id := range b {
			if id == 2 {
				t.Errorf("the call whose caller gave up was sent")
			}
		}
	}
}

// TestLoneCallerLeavesItsHeldRound checks that a caller whose own round
// is held past its deadline (a client holding the call behind a dial,
// whatever its context says) returns at the deadline: the round goes out
// from a sender's goroutine, never the caller's. In virtual time.
func TestLoneCallerLeavesItsHeldRound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &recorder{release: make(chan struct{})}
		q := &redisengine.Queue{Send: r.send}
		const deadline = 50 * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		start := time.Now()
		id := 1
		if err := q.Do(ctx, &redisengine.Entry{Item: &id}); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Do = %v, want the context's deadline", err)
		}
		if took := time.Since(start); took != deadline {
			t.Errorf("Do returned after %v, want at its %v deadline", took, deadline)
		}
		close(r.release)
		q.Close()
	})
}

// TestClose checks that Close waits for the round in flight and that
// calls after it fail with core.ErrClosed.
func TestClose(t *testing.T) {
	r := &recorder{release: make(chan struct{}), started: make(chan struct{}, 10)}
	q := &redisengine.Queue{Send: r.send}
	id := 1
	go q.Do(context.Background(), &redisengine.Entry{Item: &id})
	<-r.started
	closed := make(chan struct{})
	go func() { q.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned with a round in flight")
	case <-time.After(30 * time.Millisecond):
	}
	close(r.release)
	<-closed
	if err := q.Do(context.Background(), &redisengine.Entry{Item: new(int)}); !errors.Is(err, core.ErrClosed) {
		t.Errorf("Do after Close = %v, want core.ErrClosed", err)
	}
}
