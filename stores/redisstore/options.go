package redisstore

import (
	"time"

	"github.com/redis/go-redis/v9"
)

// ClientOptions returns the go-redis options that docs/redis.md
// recommends for a store behind a policy.Breaker whose per-call deadline
// is deadline (0 for the breaker's default), for the servers at addrs:
// the deadline bounds every read and write (ContextTimeoutEnabled), a
// failed call is the breaker's business (no retries), dials and the
// pool's waits are short but above the deadline, and the read and write
// timeouts that bound the store's pipelines are at least 500 ms and twice
// the deadline. Set IsClusterMode for a Cluster, or MasterName for
// Sentinel, and add what else you need (a password, TLS) before
// redis.NewUniversalClient.
func ClientOptions(addrs []string, deadline time.Duration) *redis.UniversalOptions {
	backstop := max(500*time.Millisecond, 2*deadline)
	return &redis.UniversalOptions{
		Addrs:                 addrs,
		ContextTimeoutEnabled: true,                   // the breaker's deadline bounds every read and write
		MaxRetries:            -1,                     // a failed call is the breaker's business
		DialTimeout:           250 * time.Millisecond, // for dials that outlive their call
		DialerRetries:         1,                      // no backoff loop behind a dial (default 5 × 100 ms)
		ReadTimeout:           backstop,               // bounds pipelined rounds and calls without a deadline (Reset)
		WriteTimeout:          backstop,
		PoolSize:              64,                           // decisions in flight at the worst latency you tolerate
		PoolTimeout:           max(time.Second, 2*deadline), // above the deadline, which ends a wait first
		DisableIdentity:       true,                         // no CLIENT SETINFO round trip on a new connection
	}
}
