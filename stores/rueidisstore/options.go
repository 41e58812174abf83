package rueidisstore

import (
	"net"
	"time"

	"github.com/redis/rueidis"
)

// ClientOption returns the rueidis options that docs/redis.md recommends
// for a store behind a policy.Breaker whose per-call deadline is deadline
// (0 for the breaker's default), for the servers at addrs: one server
// (ForceSingleClient, so that NewClient returns a client even while Redis
// is down: clear it for a Cluster), no client-side cache (sluice's keys
// change on every admitted request), no retries, short dials that must
// be answered ([Dial]), and a connection whose replies stop closed after
// at least 500 ms and twice the deadline. Add what else you need (a
// password, TLS) before rueidis.NewClient.
func ClientOption(addrs []string, deadline time.Duration) rueidis.ClientOption {
	return rueidis.ClientOption{
		InitAddress:       addrs,
		ForceSingleClient: true, // one server: NewClient returns a client even while Redis is down
		DisableCache:      true, // sluice's keys change on every admitted request
		DisableRetry:      true,
		Dialer:            net.Dialer{Timeout: 250 * time.Millisecond, KeepAlive: time.Second},
		ConnWriteTimeout:  max(500*time.Millisecond, 2*deadline), // a connection whose replies stop is closed after this
		DialCtxFn:         Dial,                                  // a server that never answers fails the dial
	}
}
