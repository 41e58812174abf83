package layered_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/layered"
	"github.com/sluicehq/sluice/stores/redisstore"
	"github.com/sluicehq/sluice/stores/rueidisstore"
	"github.com/sluicehq/sluice/stores/storetest"
)

// The conformance suite runs unchanged with allotments on: its exact checks
// decide at explicit instants, which are never allotted, and its checks on
// the store's own clock (OwnClock) hold for a store taking allotments as
// they are.
var allotmentConfigs = []struct {
	name string
	cfg  layered.Config
}{
	{"NoAllotment", layered.Config{}},
	{"Allotment", layered.Config{Allot: fixed(4)}},
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

// audited returns a layered store over remote for storetest.Run, with a
// storetest.Counter between the two and an audit above, and checks when
// the test ends that every batch the suite sent either was answered
// locally (a cached denial, allotments) or reached the remote as exactly
// one ApplyAll (the suite's Multi and MultiConcurrentSafe send them).
// Without allotments every single request not answered locally made
// exactly one remote Apply, and a batch none; with allotments a take
// makes Apply calls of its own, for single requests and batches alike.
func audited(t *testing.T, remote core.Store, cfg layered.Config) core.Store {
	t.Helper()
	counter := storetest.NewCounter(remote)
	s, err := layered.New(counter, cfg)
	if err != nil {
		t.Fatal(err)
	}
	a := &audit{Store: s}
	t.Cleanup(func() {
		apply, applyAll, _ := counter.Counts()
		batches, local := a.batches.Load(), a.localBatches.Load()
		if batches > 0 {
			t.Logf("%d batches: %d denied from the cache, %d remote ApplyAll calls, %d remote Apply calls in all", batches, local, applyAll, apply)
		}
		if applyAll != batches-local {
			t.Errorf("%d batches, %d answered from the cache, made %d remote ApplyAll calls; want one per batch not answered locally", batches, local, applyAll)
		}
		if singles, localSingles := a.singles.Load(), a.localSingles.Load(); cfg.Allot == nil && apply != singles-localSingles {
			t.Errorf("%d requests, %d answered locally, and %d batches made %d remote Apply calls; want one per request not answered locally, none for a batch", singles, localSingles, batches, apply)
		}
	})
	return a
}

// audit counts the calls a layered store answered without error, and
// those it answered locally.
type audit struct {
	*layered.Store
	batches, localBatches atomic.Int64
	singles, localSingles atomic.Int64
}

func (a *audit) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	d, err := a.Store.Apply(ctx, req)
	if err == nil {
		a.singles.Add(1)
		if d.Source == core.SourceCache || d.Source == core.SourceAllotment {
			a.localSingles.Add(1)
		}
	}
	return d, err
}

func (a *audit) ApplyAll(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	err := a.Store.ApplyAll(ctx, reqs, out)
	if err == nil {
		a.batches.Add(1)
		// The remotes here never answer from a cache of their own.
		if slices.ContainsFunc(out, func(d core.Decision) bool {
			return d.Source == core.SourceCache || d.Source == core.SourceAllotment
		}) {
			a.localBatches.Add(1)
		}
	}
	return err
}

func TestConformanceRedis(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: redistest.Shared(t).Addr()})
	t.Cleanup(func() { client.Close() })
	for _, c := range allotmentConfigs {
		t.Run(c.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) core.Store {
				return audited(t, redisRemote(t, client), c.cfg)
			})
		})
	}
}

func TestConformanceRueidis(t *testing.T) {
	client := newRueidis(t, redistest.Shared(t).Addr())
	for _, c := range allotmentConfigs {
		t.Run(c.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) core.Store {
				return audited(t, rueidisRemote(t, client), c.cfg)
			})
		})
	}
}

// TestConformanceCluster runs the suite over a Cluster, each allotment
// configuration through one client, the clients in turn: what a Cluster
// changes for each client (slots, decisions in turn) is the Redis
// engine's, which its own tests run through both, and the single-server
// runs above take both clients through every configuration.
func TestConformanceCluster(t *testing.T) {
	addrs := redistest.SharedCluster(t).Addrs()
	goredis := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { goredis.Close() })
	rue := newRueidis(t, addrs...)
	remotes := []struct {
		name string
		open func(t *testing.T) core.Store
	}{
		{"redisstore", func(t *testing.T) core.Store { return redisRemote(t, goredis) }},
		{"rueidisstore", func(t *testing.T) core.Store { return rueidisRemote(t, rue) }},
	}
	for i, c := range allotmentConfigs {
		r := remotes[i%len(remotes)]
		t.Run(r.name+"/"+c.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) core.Store {
				return audited(t, r.open(t), c.cfg)
			}, storetest.InTurn())
		})
	}
}

func TestConformanceMemstore(t *testing.T) {
	for _, c := range allotmentConfigs {
		t.Run(c.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) core.Store {
				return audited(t, newMem(t, nil), c.cfg)
			})
		})
	}
}
