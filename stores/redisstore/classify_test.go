package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/classifytest"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores"
	"github.com/sluicehq/sluice/stores/layered"
	"github.com/sluicehq/sluice/stores/redisstore"
)

// storeOn returns a store with a prefix of its own on client; the test's
// cleanup closes the store, then the client.
func storeOn(t testing.TB, client redis.UniversalClient) *redisstore.Store {
	t.Helper()
	t.Cleanup(func() { client.Close() })
	store, err := redisstore.New(client, redisstore.Config{Prefix: fmt.Sprintf("t%d:", prefixes.Add(1))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store
}

// TestClassifyPoolTimeout takes the only connection of a client's pool
// with a blocking command, so that the store's calls wait for a
// connection until the client's PoolTimeout, 5 ms. The pool's timeout is
// a store failure; NewBreaker rejects the client's PoolTimeout against
// its 16 ms deadline; and a breaker that cannot see the client (the store
// behind a decorator without Unwrap) answers the calls by its mode, with
// no error to its callers.
func TestClassifyPoolTimeout(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	// PipelinePoolSize -1: the store's pipelines take their connections
	// from the one pool, not from a pool of their own.
	client := redis.NewClient(&redis.Options{
		Addr: srv.Addr(), PoolSize: 1, PipelinePoolSize: -1, PoolTimeout: 5 * time.Millisecond, MaxRetries: -1,
	})
	store := storeOn(t, client)
	blocked := make(chan error, 1)
	go func() { blocked <- client.BLPop(context.Background(), 30*time.Second, "blocked").Err() }()
	t.Cleanup(func() {
		// Before the client closes: the pushed value ends the BLPOP.
		if _, err := srv.Do("LPUSH", "blocked", "x"); err != nil {
			t.Error(err)
		}
		if err := <-blocked; err != nil {
			t.Errorf("BLPOP: %v", err)
		}
	})
	for deadline := time.Now().Add(10 * time.Second); ; {
		info, err := srv.Do("INFO", "clients")
		if err != nil {
			t.Fatal(err)
		}
		if s, _ := info.String(); strings.Contains(s, "blocked_clients:1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the BLPOP did not block:\n%v", info)
		}
		time.Sleep(10 * time.Millisecond)
	}

	req := classifytest.Request("k")
	_, err := store.Apply(context.Background(), req)
	classifytest.Check(t, err, true, "unavailable")
	if !errors.Is(err, redis.ErrPoolTimeout) {
		t.Errorf("the error %v is not the pool's timeout", err)
	}

	_, err = policy.NewBreaker(store)
	if !errors.Is(err, policy.ErrInvalidOption) || !errors.Is(err, redisstore.ErrClientOption) || !strings.Contains(err.Error(), "PoolTimeout") {
		t.Errorf("NewBreaker over a client whose PoolTimeout is 5ms: %v; want an invalid option naming PoolTimeout", err)
	}
	t.Logf("NewBreaker: %v", err)

	classifytest.CheckBreaker(t, stores.Func(store.Apply), req)
}

// TestClientOptions checks the go-redis options the store rejects: New
// those without a read or write deadline, a breaker's NewBreaker (through
// CheckDeadline, across decorators) a PoolTimeout shorter than both its
// per-call deadline and the client's ReadTimeout. It accepts the rest,
// retries included: the store's commands are never retried
// (TestNoReplay).
func TestClientOptions(t *testing.T) {
	t.Parallel()
	const addr = "127.0.0.1:1" // nothing is contacted
	client := func(o redis.Options) func() redis.UniversalClient {
		o.Addr = addr
		return func() redis.UniversalClient { return redis.NewClient(&o) }
	}
	cluster := func(o redis.ClusterOptions) func() redis.UniversalClient {
		o.Addrs = []string{addr}
		return func() redis.UniversalClient { return redis.NewClusterClient(&o) }
	}
	tests := []struct {
		name    string
		client  func() redis.UniversalClient
		says    string        // what New's error names; "" if New accepts the client
		timeout time.Duration // the breaker's deadline; 0 for its default, 16 ms
		breaker string        // what NewBreaker's error names; "" if it accepts the client
	}{
		{name: "defaults", client: client(redis.Options{})},
		// The default PoolTimeout, the ReadTimeout (5 s) and a second, is
		// shorter than a minute but no shorter than a read.
		{name: "defaults, a minute's deadline", client: client(redis.Options{}), timeout: time.Minute},
		{name: "MaxRetries 5", client: client(redis.Options{MaxRetries: 5})},
		{name: "ReadTimeout -1", client: client(redis.Options{ReadTimeout: -1}), says: "ReadTimeout"},
		{name: "ReadTimeout -2", client: client(redis.Options{ReadTimeout: -2}), says: "ReadTimeout"},
		{name: "WriteTimeout -1", client: client(redis.Options{WriteTimeout: -1}), says: "WriteTimeout"},
		// NewClusterClient turns -1 into 0, which each node's client
		// completes as the default (5 s): only -2 is none.
		{name: "ClusterClient ReadTimeout -1", client: cluster(redis.ClusterOptions{ReadTimeout: -1})},
		{name: "ClusterClient ReadTimeout -2", client: cluster(redis.ClusterOptions{ReadTimeout: -2}), says: "ReadTimeout"},
		{name: "Ring WriteTimeout -1", client: func() redis.UniversalClient {
			return redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": addr}, WriteTimeout: -1})
		}, says: "WriteTimeout"},
		{name: "PoolTimeout 5ms", client: client(redis.Options{PoolTimeout: 5 * time.Millisecond}), breaker: "PoolTimeout"},
		{name: "ClusterClient PoolTimeout 5ms", client: cluster(redis.ClusterOptions{PoolTimeout: 5 * time.Millisecond}), breaker: "PoolTimeout"},
		{name: "PoolTimeout 5ms, a 5ms deadline", client: client(redis.Options{PoolTimeout: 5 * time.Millisecond}), timeout: 5 * time.Millisecond},
		{name: "PoolTimeout 5ms, ReadTimeout 4ms", client: client(redis.Options{PoolTimeout: 5 * time.Millisecond, ReadTimeout: 4 * time.Millisecond})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := tt.client()
			t.Cleanup(func() { client.Close() })
			store, err := redisstore.New(client, redisstore.Config{})
			if tt.says != "" {
				if !errors.Is(err, redisstore.ErrClientOption) || !strings.Contains(err.Error(), tt.says) {
					t.Errorf("New: %v; want an error wrapping ErrClientOption naming %s", err, tt.says)
				}
				t.Logf("New: %v", err)
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			// The breaker finds the store through layered's Unwrap.
			cache, err := layered.New(store, layered.Config{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cache.Close() })
			var opts []policy.BreakerOption
			if tt.timeout != 0 {
				opts = append(opts, policy.WithTimeout(tt.timeout))
			}
			b, err := policy.NewBreaker(cache, opts...)
			switch {
			case tt.breaker == "" && err != nil:
				t.Errorf("NewBreaker: %v", err)
			case tt.breaker == "":
			case !errors.Is(err, policy.ErrInvalidOption) || !errors.Is(err, redisstore.ErrClientOption) || !strings.Contains(err.Error(), tt.breaker):
				t.Errorf("NewBreaker: %v; want an invalid option naming %s", err, tt.breaker)
			default:
				t.Logf("NewBreaker: %v", err)
			}
			if b != nil {
				b.Close()
			}
		})
	}
}

// TestClassifyClosedClient closes the client under the store: every call
// then fails alike, as the store's failure.
func TestClassifyClosedClient(t *testing.T) {
	t.Parallel()
	client := redis.NewClient(&redis.Options{Addr: testAddr(t)})
	store := storeOn(t, client)
	client.Close()
	_, err := store.Apply(context.Background(), classifytest.Request("k"))
	classifytest.Check(t, err, true, "unavailable")
	if !errors.Is(err, redis.ErrClosed) {
		t.Errorf("the error %v is not the closed client's", err)
	}
}
