package layered_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/stores/layered"
	"github.com/sluicehq/sluice/stores/redisstore"
	"github.com/sluicehq/sluice/stores/rueidisstore"
	"github.com/sluicehq/sluice/stores/storetest"
)

// The conformance suite runs unchanged with leases on: its exact checks
// decide at explicit instants, which are never leased, and its checks on
// the store's own clock (OwnClock) hold for a leasing store as they are.
var leaseConfigs = []struct {
	name string
	cfg  layered.Config
}{
	{"NoLease", layered.Config{}},
	{"Lease", layered.Config{Lease: fixed(4)}},
}

// redisRemote returns a redisstore on client with a prefix of its own.
func redisRemote(t testing.TB, client redis.UniversalClient) *redisstore.Store {
	t.Helper()
	s, err := newRedisRemote(client, fmt.Sprintf("layered%d-%d:", os.Getpid(), prefixes.Add(1)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// rueidisRemote returns a rueidisstore on client with a prefix of its own.
func rueidisRemote(t testing.TB, client rueidis.Client) *rueidisstore.Store {
	t.Helper()
	s, err := newRueidisRemote(client, fmt.Sprintf("layered%d-%d:", os.Getpid(), prefixes.Add(1)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newRedisRemote(client redis.UniversalClient, prefix string) (*redisstore.Store, error) {
	return redisstore.New(client, redisstore.Config{Prefix: prefix})
}

func newRueidisRemote(client rueidis.Client, prefix string) (*rueidisstore.Store, error) {
	return rueidisstore.New(client, rueidisstore.Config{Prefix: prefix})
}

func newRueidis(t testing.TB, addrs ...string) rueidis.Client {
	t.Helper()
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	return client
}

func TestConformanceRedis(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: redistest.Shared(t).Addr()})
	t.Cleanup(func() { client.Close() })
	for _, c := range leaseConfigs {
		t.Run(c.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) core.Store {
				s, err := layered.New(redisRemote(t, client), c.cfg)
				if err != nil {
					t.Fatal(err)
				}
				return s
			})
		})
	}
}

func TestConformanceRueidis(t *testing.T) {
	client := newRueidis(t, redistest.Shared(t).Addr())
	for _, c := range leaseConfigs {
		t.Run(c.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) core.Store {
				s, err := layered.New(rueidisRemote(t, client), c.cfg)
				if err != nil {
					t.Fatal(err)
				}
				return s
			})
		})
	}
}

func TestConformanceCluster(t *testing.T) {
	addrs := redistest.SharedCluster(t).Addrs()
	goredis := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { goredis.Close() })
	rue := newRueidis(t, addrs...)
	for _, c := range leaseConfigs {
		t.Run("redisstore/"+c.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) core.Store {
				s, err := layered.New(redisRemote(t, goredis), c.cfg)
				if err != nil {
					t.Fatal(err)
				}
				return s
			})
		})
		t.Run("rueidisstore/"+c.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) core.Store {
				s, err := layered.New(rueidisRemote(t, rue), c.cfg)
				if err != nil {
					t.Fatal(err)
				}
				return s
			})
		})
	}
}

func TestConformanceMemstore(t *testing.T) {
	for _, c := range leaseConfigs {
		t.Run(c.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) core.Store {
				s, err := layered.New(newMem(t, nil), c.cfg)
				if err != nil {
					t.Fatal(err)
				}
				return s
			})
		})
	}
}
