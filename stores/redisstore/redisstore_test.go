package redisstore_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/stores/redisstore"
	"github.com/sluicehq/sluice/stores/storetest"
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

func TestConformance(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: testAddr(t), MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	storetest.Run(t, func(t *testing.T) core.Store { return newStore(t, client) })
}

func TestConformanceCluster(t *testing.T) {
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.SharedCluster(t).Addrs(), MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	storetest.Run(t, func(t *testing.T) core.Store { return newStore(t, client) })
}
