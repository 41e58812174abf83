package redisstore_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redisfaults"
	"github.com/sluicehq/sluice/redistest"
)

// TestDemotedPrimary is redisfaults.CheckDemotedPrimary: after a failover
// that repoints an address, go-redis drops each connection whose reply is
// READONLY and dials the address again, so that decisions come from the
// new primary within a second of the switch.
func TestDemotedPrimary(t *testing.T) {
	t.Parallel()
	primary, replica := redistest.Start(t), redistest.Start(t)
	redisfaults.Replicate(t, replica, primary)
	proxy := redistest.NewProxy(t, primary.Addr())
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { client.Close() })
	redisfaults.CheckDemotedPrimary(t, newStore(t, client), proxy, primary, replica)
}
