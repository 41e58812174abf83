package rueidisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/rueidisstore"
)

// TestDownAtStart checks what docs/redis.md says of rueidis while Redis is
// down when a service starts. Without ForceSingleClient, rueidis.NewClient
// fails and gives no client (it asks the server whether it is a Cluster),
// so a service that needs one cannot start. With it, NewClient returns the
// dial error and a client; the store made on it answers each decision
// with a store failure (one policy.IsStoreFailure knows, which a breaker's
// mode answers) while Redis is down, and decides on Redis once the same
// server is back, with no new client.
func TestDownAtStart(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	opts := rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true, DisableRetry: true}
	if c, err := rueidis.NewClient(opts); err == nil || c != nil {
		if c != nil {
			c.Close()
		}
		t.Fatalf("rueidis.NewClient without ForceSingleClient, Redis down = %v, %v; want no client and an error", c, err)
	}
	opts.ForceSingleClient = true
	client, err := rueidis.NewClient(opts)
	if client == nil || err == nil {
		t.Fatalf("rueidis.NewClient with ForceSingleClient, Redis down = %v, %v; want a client and the dial error", client, err)
	}
	t.Cleanup(client.Close)
	store, err := rueidisstore.New(client, rueidisstore.Config{Prefix: "down-at-start:"})
	if err != nil {
		t.Fatalf("rueidisstore.New while Redis is down: %v", err)
	}
	req := core.Request{Key: "k", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerMinute(3)}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := store.Apply(ctx, req); err == nil || !policy.IsStoreFailure(err) {
		t.Fatalf("Apply while Redis is down = %v, want a store failure (policy.IsStoreFailure)", err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, err := store.Apply(ctx, req)
		if err == nil {
			if !d.Allowed || d.Remaining != 2 {
				t.Fatalf("the first decision after the restart = %+v, want allowed with 2 left", d)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no decision 10 s after Redis came back: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
