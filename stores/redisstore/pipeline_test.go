package redisstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redisfaults"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/redisstore"
)

// TestPipelineAbandonedNotSent checks that a pipelined call whose caller
// gave up before its batch was written is not sent: the caller was told
// its call failed, so it must not be charged, and a Redis recovering from
// a stall must not receive every call abandoned meanwhile. Redis is held
// busy for a second; 40 callers with 50 ms deadlines queue behind the (at
// most 4) batches in flight. Before the fix all 40 were charged once Redis
// was free again.
func TestPipelineAbandonedNotSent(t *testing.T) {
	t.Parallel()
	const callers = 40
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { client.Close() })
	store := newStore(t, client)
	req := core.Request{Key: "abandoned", Algorithm: algorithms.TokenBucket, Limit: core.PerHour(1000), Cost: 1}
	peek := req
	peek.Op, peek.Cost = core.OpPeek, 0 // remaining, with nothing taken
	// Load the script and open connections.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if _, err := store.Apply(context.Background(), peek); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	busy := make(chan error, 1)
	go func() {
		_, err := srv.Do("EVAL", redisfaults.BusyLua, "0", "1000000")
		busy <- err
	}()
	time.Sleep(100 * time.Millisecond) // let the script start
	errs := make(chan error, callers)
	for range callers {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			_, err := store.Apply(ctx, req)
			errs <- err
		})
		time.Sleep(5 * time.Millisecond)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Apply on a busy Redis with a 50ms deadline = %v, want context.DeadlineExceeded", err)
		}
	}
	if err := <-busy; err != nil {
		t.Fatal(err)
	}
	store.Close() // waits for the batches in flight
	plain, err := redisstore.New(client, redisstore.Config{Prefix: store.Prefix()})
	if err != nil {
		t.Fatal(err)
	}
	d, err := plain.Apply(context.Background(), peek)
	if err != nil {
		t.Fatal(err)
	}
	charged := 1000 - d.Remaining
	t.Logf("%d of %d abandoned calls charged", charged, callers)
	if charged > callers/2 {
		t.Errorf("%d of %d calls abandoned while queued were charged, want only those in flight (a few)", charged, callers)
	}
}
