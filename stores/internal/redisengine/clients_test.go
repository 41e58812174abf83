package redisengine_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/classifytest"
	"github.com/sluicehq/sluice/internal/redisfaults"
	"github.com/sluicehq/sluice/stores/redisstore"
	"github.com/sluicehq/sluice/stores/rueidisstore"
)

// store is a Redis store of either client, as the tests of both use it.
type store interface {
	core.Store
	Key(key string, alg core.Algorithm) string
	Prefix() string
}

// client is one of the two Redis clients, as the tests of what both
// stores share (the engine's behaviour, on real servers) make its stores.
// Where the clients behave differently, its fields say how.
type client struct {
	name string
	// open returns a store with a prefix of its own on a client of its
	// own, of one server or of a Cluster's nodes (several addresses),
	// that retries nothing; both are closed when the test ends.
	open func(t testing.TB, addrs ...string) store
	// openTLS is open for one server, over TLS with cfg.
	openTLS func(t testing.TB, addr string, cfg *tls.Config) store
	// sentinel returns a store on a client of a Sentinel set, with the
	// options docs/redis.md recommends in front of a breaker.
	sentinel func(t testing.TB, master string, addrs []string) core.Store
	// counted returns a store on a client that counts its dials and
	// commands, what it counts, and the count.
	counted func(t testing.TB, addr string) (s store, what string, n func() int64)
	// classify are the stores classifytest's rows run through.
	classify classifytest.Stores
	// warm opens the store's connections before a call that must time
	// out (redisfaults.Warm), or is nil.
	warm redisfaults.Warm
	// paused are what may remain of 5 after a call paused past its
	// deadline, applied once (4) or dropped with its connection (5).
	paused []int64
}

// clients are the two Redis stores' clients: each test of what both
// stores share runs on each.
var clients = []client{
	{
		name: "go-redis",
		open: func(t testing.TB, addrs ...string) store {
			return goredisStore(t, redis.NewUniversalClient(&redis.UniversalOptions{
				Addrs: addrs, IsClusterMode: len(addrs) > 1, MaxRetries: -1, ContextTimeoutEnabled: true, PoolSize: 80,
			}))
		},
		openTLS: func(t testing.TB, addr string, cfg *tls.Config) store {
			return goredisStore(t, redis.NewClient(&redis.Options{Addr: addr, TLSConfig: cfg, MaxRetries: -1}))
		},
		sentinel: func(t testing.TB, master string, addrs []string) core.Store {
			opts := redisstore.ClientOptions(addrs, 0)
			opts.MasterName, opts.PoolSize = master, 16
			return goredisStore(t, redis.NewUniversalClient(opts))
		},
		counted: func(t testing.TB, addr string) (store, string, func() int64) {
			c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
			hook := &countHook{}
			c.AddHook(hook)
			return goredisStore(t, c), "dials and commands", hook.n.Load
		},
		classify: classifytest.Stores{
			Single: func(t testing.TB, d classifytest.Dial) core.Store {
				return goredisStore(t, redis.NewClient(&redis.Options{
					Addr: d.Addr, Username: d.Username, Password: d.Password, TLSConfig: d.TLS,
					MaxRetries: -1, DialerRetries: 1,
				}))
			},
			Cluster: func(t testing.TB, addrs []string) core.Store {
				return goredisStore(t, redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, DialerRetries: 1}))
			},
		},
		// The caller gives up at its deadline; its call stays in its
		// pipeline, which keeps its connection, and runs once the pause
		// ends.
		paused: []int64{4},
	},
	{
		name: "rueidis",
		open: func(t testing.TB, addrs ...string) store {
			return rueidisStore(t, newRueidis(t, rueidis.ClientOption{InitAddress: addrs}))
		},
		openTLS: func(t testing.TB, addr string, cfg *tls.Config) store {
			return rueidisStore(t, newRueidis(t, rueidis.ClientOption{InitAddress: []string{addr}, TLSConfig: cfg}))
		},
		sentinel: func(t testing.TB, master string, addrs []string) core.Store {
			opt := rueidisstore.ClientOption(addrs, 0)
			opt.Sentinel = rueidis.SentinelOption{
				MasterSet:               master,
				Dialer:                  opt.Dialer,
				TopologyRefreshInterval: 5 * time.Second, // a missed +switch-master is made good within 5 s
			}
			return rueidisStore(t, newRueidis(t, opt))
		},
		counted: func(t testing.TB, addr string) (store, string, func() int64) {
			c := &countingClient{Client: newRueidis(t, rueidis.ClientOption{InitAddress: []string{addr}})}
			return rueidisStore(t, c), "commands", c.n.Load
		},
		classify: classifytest.Stores{
			Single: func(t testing.TB, d classifytest.Dial) core.Store {
				// NewClient returns the client even when the server
				// refuses it (a wrong password, a TLS handshake), with
				// the error, and the row's calls then meet the failure.
				return rueidisStore(t, newRueidis(t, rueidis.ClientOption{
					InitAddress: []string{d.Addr}, Username: d.Username, Password: d.Password, TLSConfig: d.TLS,
				}))
			},
			Cluster: func(t testing.TB, addrs []string) core.Store {
				return rueidisStore(t, newRueidis(t, rueidis.ClientOption{InitAddress: addrs}))
			},
			// rueidis follows the storm's redirections until the call's
			// deadline.
			Types: map[string]string{"MOVED storm": "timeout"},
		},
		warm: warmRueidis,
		// A connection used by one caller at a time (as here) is closed
		// when its call's deadline passes, and the server drops a paused
		// client's pending command when its connection closes: 5 remain.
		// A connection shared by concurrent callers is kept, and the call
		// runs when the pause ends: 4 remain.
		paused: []int64{4, 5},
	},
}

var prefixes atomic.Int64

// nextPrefix returns a prefix no other store of the test binary has.
func nextPrefix() string { return fmt.Sprintf("t%d:", prefixes.Add(1)) }

// goredisStore returns a store with a prefix of its own on c; the test's
// cleanup closes the store, then the client.
func goredisStore(t testing.TB, c redis.UniversalClient) store {
	t.Helper()
	t.Cleanup(func() { c.Close() })
	s, err := redisstore.New(c, redisstore.Config{Prefix: nextPrefix()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// newRueidis returns a rueidis client with opt, without a client-side
// cache or retries, closed when the test ends. A client of one server is
// forced to be one (ForceSingleClient): miniredis answers CLUSTER SLOTS,
// and rueidis would take it for a Cluster.
func newRueidis(t testing.TB, opt rueidis.ClientOption) rueidis.Client {
	t.Helper()
	opt.DisableCache, opt.DisableRetry = true, true
	opt.ForceSingleClient = opt.Sentinel.MasterSet == "" && len(opt.InitAddress) == 1
	c, err := rueidis.NewClient(opt)
	if c == nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// rueidisStore returns a store with a prefix of its own on c, closed when
// the test ends.
func rueidisStore(t testing.TB, c rueidis.Client) store {
	t.Helper()
	s, err := rueidisstore.New(c, rueidisstore.Config{Prefix: nextPrefix()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// countHook counts the dials and commands of a go-redis client.
type countHook struct{ n atomic.Int64 }

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		h.n.Add(1)
		return next(ctx, network, addr)
	}
}

func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// countingClient is a rueidis client that counts the commands sent
// through it.
type countingClient struct {
	rueidis.Client
	n atomic.Int64
}

func (c *countingClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.n.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c *countingClient) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	c.n.Add(int64(len(cmds)))
	return c.Client.DoMulti(ctx, cmds...)
}

// warmPeeks is how many peeks open a rueidis client's connections before
// a call that must time out. rueidis sends each keyed command over one of
// its 2^PipelineMultiplex connections (2 to 4 by default) picked at
// random, dialling it on first use: a call that lands on a connection
// still to be dialled times out in the handshake and is never sent, which
// would hide what the test looks for. 64 random picks leave one of 4
// connections undialled with a chance of about 4·(3/4)^64 ≈ 4·10⁻⁸.
const warmPeeks = 64

// warmRueidis is the rueidis client's [redisfaults.Warm]: it opens the
// store's connections with peeks of key, checking that its bucket is
// full.
func warmRueidis(t testing.TB, s core.Store, key string) {
	t.Helper()
	for range warmPeeks {
		if n := redisfaults.RemainingOf(t, s, key); n != 5 {
			t.Fatalf("%d remaining before the call, want 5", n)
		}
	}
}

// forEach runs f for each client, in a parallel subtest named after it.
func forEach(t *testing.T, f func(t *testing.T, c client)) {
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f(t, c)
		})
	}
}
