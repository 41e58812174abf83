package composetest_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/layered"
	"github.com/sluicehq/sluice/stores/memstore"
	"github.com/sluicehq/sluice/stores/redisstore"
	"github.com/sluicehq/sluice/stores/rueidisstore"
	"github.com/sluicehq/sluice/stores/storetest"
	"github.com/sluicehq/sluice/telemetry"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// callTimeout is the breaker's per-call deadline in these tests: far
// above any Redis call on a loaded test machine, so that no decision is
// the breaker's mode's. A test that saw one would fail (storetest wants
// every decision from the store).
const callTimeout = 10 * time.Second

// chain returns the production chain over backend,
//
//	telemetry → policy → breaker → layered → Counter → backend,
//
// and the Counter. Closing the chain closes backend. It fails t if a
// constructor fails.
func chain(t testing.TB, backend core.Store) (core.Store, *storetest.Counter) {
	t.Helper()
	counter := storetest.NewCounter(backend)
	cache, err := layered.New(counter, layered.Config{})
	if err != nil {
		t.Fatal(err)
	}
	breaker, err := policy.NewBreaker(cache, policy.WithTimeout(callTimeout))
	if err != nil {
		t.Fatal(err)
	}
	// Lists that match no key of the tests: the policy looks every
	// request up and forwards it.
	pol, err := policy.New(breaker,
		policy.WithAllowList(func(key string) bool { return key == "composetest:internal" }),
		policy.WithDenyList(func(key string) bool { return key == "composetest:banned" }),
	)
	if err != nil {
		t.Fatal(err)
	}
	tel, err := telemetry.New(pol,
		telemetry.WithTracerProvider(tracenoop.NewTracerProvider()),
		telemetry.WithMeterProvider(metricnoop.NewMeterProvider()),
	)
	if err != nil {
		t.Fatal(err)
	}
	return tel, counter
}

var prefixes atomic.Int64

// prefix returns a key prefix no other store of the test binary uses, so
// that stores sharing a server never share a key.
func prefix() string { return fmt.Sprintf("compose%d:", prefixes.Add(1)) }

// newGoRedis returns a go-redis client of addrs (one server, or a
// Cluster's masters), closed when the test ends.
func newGoRedis(t testing.TB, addrs ...string) redis.UniversalClient {
	t.Helper()
	var c redis.UniversalClient
	if len(addrs) == 1 {
		c = redis.NewClient(&redis.Options{Addr: addrs[0], ContextTimeoutEnabled: true})
	} else {
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// newRueidis returns a rueidis client of addrs (one server, or a
// Cluster's masters), closed when the test ends.
func newRueidis(t testing.TB, addrs ...string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// onGoRedis returns a function that makes a redisstore on client with a
// prefix of its own.
func onGoRedis(client redis.UniversalClient) func(t testing.TB) core.Store {
	return func(t testing.TB) core.Store {
		t.Helper()
		s, err := redisstore.New(client, redisstore.Config{Prefix: prefix()})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

// onRueidis returns a function that makes a rueidisstore on client with a
// prefix of its own.
func onRueidis(client rueidis.Client) func(t testing.TB) core.Store {
	return func(t testing.TB) core.Store {
		t.Helper()
		s, err := rueidisstore.New(client, rueidisstore.Config{Prefix: prefix()})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

func newMemstore(t testing.TB) core.Store {
	t.Helper()
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// runThroughChain runs the conformance suite on the chain over backends
// made by newBackend.
func runThroughChain(t *testing.T, newBackend func(t testing.TB) core.Store, opts ...storetest.Option) {
	storetest.Run(t, func(t *testing.T) core.Store {
		s, _ := chain(t, newBackend(t))
		return s
	}, opts...)
}

func TestConformanceMemstore(t *testing.T) {
	t.Parallel()
	runThroughChain(t, newMemstore)
}

func TestConformanceRedisstore(t *testing.T) {
	t.Parallel()
	runThroughChain(t, onGoRedis(newGoRedis(t, redistest.Shared(t).Addr())))
}

func TestConformanceRueidisstore(t *testing.T) {
	t.Parallel()
	runThroughChain(t, onRueidis(newRueidis(t, redistest.Shared(t).Addr())))
}

// On a Cluster, a batch of keys in different slots is decided in turn.

func TestConformanceRedisstoreCluster(t *testing.T) {
	t.Parallel()
	runThroughChain(t, onGoRedis(newGoRedis(t, redistest.SharedCluster(t).Addrs()...)), storetest.InTurn())
}

func TestConformanceRueidisstoreCluster(t *testing.T) {
	t.Parallel()
	runThroughChain(t, onRueidis(newRueidis(t, redistest.SharedCluster(t).Addrs()...)), storetest.InTurn())
}
