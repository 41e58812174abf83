package redisstore_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/classifytest"
	"github.com/sluicehq/sluice/internal/redisfaults"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/redisstore"
	"github.com/sluicehq/sluice/stores/storetest"
)

// TestConformanceSentinel runs the conformance suite through a failover
// client (go-redis's NewFailoverClient), which asks the sentinels of a
// Sentinel set for the primary.
func TestConformanceSentinel(t *testing.T) {
	t.Parallel()
	set := redistest.StartSentinel(t)
	client := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: set.MasterName(), SentinelAddrs: set.SentinelAddrs()})
	t.Cleanup(func() { client.Close() })
	storetest.Run(t, func(t *testing.T) core.Store { return newStore(t, client) })
}

// TestSentinelFailover kills a Sentinel set's primary under load, with a
// breaker in each mode in front of a store on a failover client of its
// own (redisfaults.CheckSentinelFailover): no caller sees an error, the
// store decides again on the promoted replica, and no more is admitted
// than the limit and one lost burst allow.
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	redisfaults.CheckSentinelFailover(t, "go-redis", sentinelStore, classifytest.Guard)
}

// sentinelStore is a store on a failover client with the options
// docs/redis.md recommends in front of a breaker.
func sentinelStore(t testing.TB, master string, addrs []string) core.Store {
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            master,
		SentinelAddrs:         addrs,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		DialTimeout:           250 * time.Millisecond,
		DialerRetries:         1,
		ReadTimeout:           500 * time.Millisecond,
		WriteTimeout:          500 * time.Millisecond,
		PoolSize:              16,
		PoolTimeout:           time.Second,
		DisableIdentity:       true,
	})
	t.Cleanup(func() { client.Close() })
	store, err := redisstore.New(client, redisstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return store
}
