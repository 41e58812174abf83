package redisstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redisfaults"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores"
	"github.com/sluicehq/sluice/stores/internal/redisengine"
	"github.com/sluicehq/sluice/stores/redisstore"
)

// TestNoReplay checks that no go-redis client, whatever its retry
// options, runs a decision twice when its reply times out. Each client's
// reads are bounded by its ReadTimeout (50 ms), the calls' contexts have no
// deadline, and the server is busy for 300 ms, so every attempt a client
// makes is received and, once the server is free, run. The control, the
// same script sent with a plain go-redis command through a default client,
// must be replayed, or the harness proves nothing.
func TestNoReplay(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	addr := srv.Addr()
	// A Cluster client over the one server, which holds every slot.
	slots := func(context.Context) ([]redis.ClusterSlot, error) {
		return []redis.ClusterSlot{{Start: 0, End: redistest.NumSlots - 1, Nodes: []redis.ClusterNode{{Addr: addr}}}}, nil
	}
	const readTimeout = 50 * time.Millisecond
	clients := []struct {
		name   string
		client func() redis.UniversalClient
	}{
		{"Client default", func() redis.UniversalClient {
			return redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: readTimeout})
		}},
		{"Client MaxRetries 5", func() redis.UniversalClient {
			return redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: readTimeout, MaxRetries: 5})
		}},
		{"Client MaxRetries -1", func() redis.UniversalClient {
			return redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: readTimeout, MaxRetries: -1})
		}},
		{"ClusterClient default", func() redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{ClusterSlots: slots, ReadTimeout: readTimeout})
		}},
		{"ClusterClient MaxRetries -1", func() redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{ClusterSlots: slots, ReadTimeout: readTimeout, MaxRetries: -1})
		}},
	}
	for _, tt := range clients {
		t.Run(tt.name, func(t *testing.T) {
			client := tt.client()
			t.Cleanup(func() { client.Close() })
			store, err := redisstore.New(client, redisstore.Config{Prefix: prefixFor(t)})
			if err != nil {
				t.Fatal(err)
			}
			r := redisfaults.BusyCall(t, srv, store, context.Background, nil)
			if runs := 5 - r.Remaining; runs != 1 {
				t.Errorf("the call ran %d times, want once", runs)
			}
		})
	}
	t.Run("control", func(t *testing.T) {
		client := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: readTimeout})
		t.Cleanup(func() { client.Close() })
		store, err := redisstore.New(client, redisstore.Config{Prefix: prefixFor(t)})
		if err != nil {
			t.Fatal(err)
		}
		// The store's own reads, and a plain EVALSHA for the call.
		plain := stores.Func(func(ctx context.Context, req core.Request) (core.Decision, error) {
			if req.Op == core.OpPeek {
				return store.Apply(ctx, req)
			}
			script := algorithms.TokenBucket.(algorithms.Scripted).Script()
			key := redisengine.Key(store.Prefix(), req.Key, algorithms.TokenBucket.Name())
			args := string(redisengine.AppendArgs(nil, &req))
			return core.Decision{}, client.EvalSha(ctx, script.Hash(), []string{key}, args).Err()
		})
		// The plain command needs a connection of its own that is open
		// before the server is busy: its handshake would time out.
		warm := func(t testing.TB, _ core.Store, key string) {
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					if err := client.Ping(context.Background()).Err(); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			if n := redisfaults.RemainingOf(t, store, key); n != 5 {
				t.Fatalf("%d remaining before the call, want 5", n)
			}
		}
		r := redisfaults.BusyCall(t, srv, plain, context.Background, warm)
		if runs := 5 - r.Remaining; runs < 2 {
			t.Errorf("a plain go-redis EVALSHA ran %d times: the harness no longer sees go-redis's replays", runs)
		}
	})
}
