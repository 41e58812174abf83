package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redisfaults"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/internal/redisengine"
	"github.com/sluicehq/sluice/stores/redisstore"
)

// TestClusterReloadsAfterFailure kills the master that holds a key and
// checks that the failed decision makes the Cluster client read the slot
// map again from a surviving node, without waiting for its
// ClusterStateReloadInterval (a minute by default): that is how a
// promoted replica is found in about a second rather than a minute.
func TestClusterReloadsAfterFailure(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	defer client.Close()
	store, err := redisstore.New(client, redisstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := core.Request{Key: "user:1", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(10)}}
	if _, err := store.Apply(ctx, req); err != nil {
		t.Fatal(err)
	}
	victim, err := c.Owner(redisengine.Key(redisengine.DefaultPrefix, req.Key, req.Algorithm.Name()))
	if err != nil {
		t.Fatal(err)
	}
	// slotReads counts the slot-map reads the surviving nodes served.
	slotReads := func() int64 {
		var n int64
		for _, s := range c.Servers() {
			if s != victim {
				n += redisfaults.InfoCount(redisfaults.Info(t, s, "commandstats"), "cmdstat_cluster|slots", "calls")
			}
		}
		return n
	}
	before := slotReads()
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Apply(ctx, req); err == nil {
		t.Fatal("a decision on a killed master succeeded")
	}
	for deadline := time.Now().Add(5 * time.Second); slotReads() == before; {
		if time.Now().After(deadline) {
			t.Fatal("the failed call did not make the client read the slot map again within 5 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
