package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redisfaults"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/redisstore"
)

var prefixes atomic.Int64

// newStore returns a store on client with a prefix of its own, so that
// stores sharing a server never share a key.
func newStore(t *testing.T, client redis.UniversalClient) *redisstore.Store {
	t.Helper()
	store, err := redisstore.New(client, redisstore.Config{Prefix: fmt.Sprintf("t%d:", prefixes.Add(1))})
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// TestPipelineCallerContext checks that a caller returns when
// its context ends, even while its batch waits on a busy Redis, and that
// Close waits for the batch.
func TestPipelineCallerContext(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { client.Close() })
	store := newStore(t, client)
	req := core.Request{Key: "k", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerHour(1)}}
	if _, err := store.Apply(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	busy := make(chan error, 1)
	go func() {
		// A second, not until the next whole second: that may come
		// before the call, which is then answered at once.
		_, err := srv.Do("EVAL", redisfaults.BusyLua, "0", "1000000")
		busy <- err
	}()
	time.Sleep(100 * time.Millisecond) // let the script start
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	canary := redisfaults.StartCanary()
	start := time.Now()
	_, err := store.Apply(ctx, req)
	took, stalled := time.Since(start), canary.Stop()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Apply on a busy Redis with a 50ms deadline = %v, want context.DeadlineExceeded", err)
	}
	// Well before the script ends, unless this process stalled as long.
	if took > 500*time.Millisecond+stalled {
		t.Errorf("Apply returned after %v, not when its context ended (the process stalled %v at most)", took, stalled)
	}
	store.Close() // waits for the batch
	if err := <-busy; err != nil {
		t.Fatal(err)
	}
	if _, err := store.Apply(context.Background(), req); !errors.Is(err, core.ErrClosed) {
		t.Errorf("Apply after Close = %v, want ErrClosed", err)
	}
}
