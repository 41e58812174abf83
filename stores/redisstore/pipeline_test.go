package redisstore_test

import (
	"context"
	"errors"
	"strconv"
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
// busy for two seconds; 40 callers with 50 ms deadlines queue behind the
// (at most 4) batches in flight. Before the fix all 40 were charged once
// Redis was free again.
//
// On a loaded machine the script may begin late, or the callers take
// longer to start than the script runs: a call made wholly within the
// script must time out, and only the calls that failed count as
// abandoned.
func TestPipelineAbandonedNotSent(t *testing.T) {
	t.Parallel()
	const (
		callers  = 40
		deadline = 50 * time.Millisecond
		busyFor  = 2 * time.Second
	)
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { client.Close() })
	store := newStore(t, client)
	req := core.Request{Key: "abandoned", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerHour(1000)}}
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
	type result struct {
		at  time.Time // when the script began, or the call was made
		err error
	}
	busy := make(chan result, 1)
	go func() {
		r, err := srv.Do("EVAL", redisfaults.BusyLua, "0", strconv.FormatInt(busyFor.Microseconds(), 10))
		if err != nil {
			busy <- result{err: err}
			return
		}
		us, err := r.Int()
		busy <- result{time.UnixMicro(us), err}
	}()
	time.Sleep(100 * time.Millisecond) // let the script start
	calls := make(chan result, callers)
	for range callers {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			sent := time.Now()
			_, err := store.Apply(ctx, req)
			calls <- result{sent, err}
		})
		time.Sleep(5 * time.Millisecond)
	}
	wg.Wait()
	close(calls)
	script := <-busy
	if script.err != nil {
		t.Fatal(script.err)
	}
	var within, failed int
	for c := range calls {
		if c.err != nil {
			failed++
		}
		if c.at.Before(script.at) || c.at.Add(deadline).After(script.at.Add(busyFor)) {
			continue // not wholly within the script: either answer will do
		}
		within++
		if !errors.Is(c.err, context.DeadlineExceeded) {
			t.Errorf("Apply on a busy Redis with a %v deadline = %v, want context.DeadlineExceeded", deadline, c.err)
		}
	}
	if within < callers/2 {
		t.Fatalf("only %d of %d calls were made while the script ran: the test proves little", within, callers)
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
	// The calls that succeeded were charged; of those that failed, only
	// the few in flight as their callers gave up may be.
	abandoned := 1000 - d.Remaining - int64(callers-failed)
	t.Logf("%d calls made while the script ran; %d of %d abandoned calls charged", within, abandoned, failed)
	if abandoned > int64(failed/2) {
		t.Errorf("%d of %d calls abandoned while queued were charged, want only those in flight (a few)", abandoned, failed)
	}
}
