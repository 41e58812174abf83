package grpclimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/policy"
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

// TestBreakerModesRedisDown serves gRPC through grpclimit over a
// policy.Breaker over redisstore on a redis-server the test has killed:
// fail-closed answers Unavailable, fail-open lets the call through, and
// neither returns the store's error, before the circuit opens and after.
func TestBreakerModesRedisDown(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mode policy.Mode
		want codes.Code
	}{
		{policy.FailClosed, codes.Unavailable},
		{policy.FailOpen, codes.OK},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			t.Parallel()
			client := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: 250 * time.Millisecond, DialerRetries: 1, ContextTimeoutEnabled: true})
			t.Cleanup(func() { client.Close() })
			s, err := redisstore.New(client, redisstore.Config{})
			if err != nil {
				t.Fatal(err)
			}
			b, err := policy.NewBreaker(s, policy.WithMode(tc.mode))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			c := serve(t, oneRule(t, b, algorithms.TokenBucket, core.PerSecond(10)))
			// The calls fail on the dead Redis until the circuit opens
			// (a run of failures opens it once it has lasted a few tens
			// of milliseconds), and are answered by the mode all the
			// same, before and after.
			deadline := time.Now().Add(5 * time.Second)
			for i := 0; b.State() != policy.Open || i < 20; i++ {
				if err := check(context.Background(), c); status.Code(err) != tc.want {
					t.Fatalf("call %d with Redis down, %v: %v, want %v", i+1, tc.mode, err, tc.want)
				}
				if time.Now().After(deadline) {
					t.Fatalf("the circuit is %v after %d calls in 5 s on a dead Redis, want open", b.State(), i+1)
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}
