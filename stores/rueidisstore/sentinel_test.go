package rueidisstore_test

import (
	"net"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/classifytest"
	"github.com/sluicehq/sluice/internal/redisfaults"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/rueidisstore"
	"github.com/sluicehq/sluice/stores/storetest"
)

// TestConformanceSentinel runs the conformance suite through a rueidis
// client given a Sentinel set's sentinels (SentinelOption.MasterSet),
// which asks them for the primary.
func TestConformanceSentinel(t *testing.T) {
	t.Parallel()
	set := redistest.StartSentinel(t)
	client, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:  set.SentinelAddrs(),
		Sentinel:     rueidis.SentinelOption{MasterSet: set.MasterName()},
		DisableCache: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	storetest.Run(t, func(t *testing.T) core.Store { return newStore(t, client) })
}

// TestSentinelFailover kills a Sentinel set's primary under load, with a
// breaker in each mode in front of a store on a rueidis client of its own
// (redisfaults.CheckSentinelFailover): no caller sees an error, the store
// decides again on the promoted replica, and no more is admitted than the
// limit and one lost burst allow.
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	redisfaults.CheckSentinelFailover(t, "rueidis", sentinelStore, classifytest.Guard)
}

// sentinelStore is a store on a rueidis client of a Sentinel set, with
// the options docs/redis.md recommends in front of a breaker.
func sentinelStore(t testing.TB, master string, addrs []string) core.Store {
	dialer := net.Dialer{Timeout: 250 * time.Millisecond, KeepAlive: time.Second}
	client, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: addrs,
		Sentinel: rueidis.SentinelOption{
			MasterSet:               master,
			Dialer:                  dialer,
			TopologyRefreshInterval: 5 * time.Second, // a missed +switch-master is made good within 5 s
		},
		DisableCache:     true,
		DisableRetry:     true,
		Dialer:           dialer,
		ConnWriteTimeout: 500 * time.Millisecond,
		MaxFlushDelay:    20 * time.Microsecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	store, err := rueidisstore.New(client, rueidisstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return store
}
