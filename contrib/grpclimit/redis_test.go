package grpclimit_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/redisstore"
)

// TestQuotaLeakRedis runs TestQuotaLeak's unary calls and streams on a
// real redis-server of the test's own, where a two-rule stack is one
// script call.
func TestQuotaLeakRedis(t *testing.T) {
	t.Parallel()
	client := redis.NewClient(&redis.Options{Addr: redistest.Start(t).Addr(), MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { client.Close() })
	s, err := redisstore.New(client, redisstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	quotaLeak(t, s)
}
