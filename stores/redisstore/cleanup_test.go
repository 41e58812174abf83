package redisstore_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redisfaults"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/redisstore"
)

// TestBoundedCleanup: on a Redis whose clients are all paused
// (CLIENT PAUSE ALL), callers of Wait, Reserve and Cancel, Acquire,
// Release and a stack's Wait give up; each call returns within its
// context's end plus core.CleanupTimeout, and reports the refund or
// release it could not confirm (core.ErrCleanup) with the reason the
// caller gave up.
func TestBoundedCleanup(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	store, err := redisstore.New(client, redisstore.Config{Prefix: "cleanup:"})
	if err != nil {
		t.Fatal(err)
	}
	redisfaults.CheckBoundedCleanup(t, store, func() {
		if _, err := srv.Do("CLIENT", "PAUSE", "2000", "ALL"); err != nil {
			t.Fatal(err)
		}
	})
}
