package redisstore_test

import (
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redisfaults"
	"github.com/sluicehq/sluice/stores/redisstore"
)

// TestShaping runs the shaping scenario (redisfaults.CheckShaping) through
// Redis: the queue is the key's debt in Redis, bounded in the script.
func TestShaping(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: testAddr(t), MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	store, err := redisstore.New(client, redisstore.Config{Prefix: fmt.Sprintf("shaping%d:", prefixes.Add(1))})
	if err != nil {
		t.Fatal(err)
	}
	for _, alg := range []core.Algorithm{algorithms.GCRA, algorithms.TokenBucket} {
		t.Run(alg.Name(), func(t *testing.T) { redisfaults.CheckShaping(t, store, alg) })
	}
}
