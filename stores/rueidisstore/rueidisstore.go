package rueidisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores/internal/redisengine"
)

// ErrMalformed reports a script reply that breaks the calling convention
// of [algorithms.Script]: not ten packed integers, or numbers no decision
// can hold. Apply wraps it with what it received.
var ErrMalformed = redisengine.ErrMalformed

// clientDown are rueidis's own errors that any call would get while the
// client stays as it is: it is closed or cannot connect, or a Cluster
// slot has no node. The store marks them, as it does Redis's replies of
// the kind, with core.ErrUnavailable.
var clientDown = []error{rueidis.ErrClosing, rueidis.ErrNoSlot}

// DefaultPrefix starts every key the store writes unless [Config]'s
// Prefix names another.
const DefaultPrefix = redisengine.DefaultPrefix

// Config configures a [Store]. The zero Config is ready to use.
type Config struct {
	// Prefix starts every key the store writes, to keep sluice's keys
	// apart from an application's. It must not contain a brace (see
	// docs/redis.md for the key layout). The default is [DefaultPrefix].
	Prefix string
}

// Store keeps limiter state in Redis through a rueidis client and decides
// each request with its algorithm's Lua twin, atomically, in one round
// trip. It shares its engine, the Redis work of both stores, with
// redisstore; only the client differs. The store sends the decisions of concurrent callers together, as
// redisstore does: one call in flight at a time, carrying every decision
// that arrived during the previous round trip, one write and one read for
// all of them, and on a single server one script call
// (algorithms.MultiScript), which costs the client and Redis less per
// decision than a command each. The store's own goroutine makes the call,
// so each caller returns as soon as its own context ends, even while
// rueidis holds the call behind a dial of its connection. It works
// with a single server, Sentinel or Redis Cluster, where each key's state
// lives in the slot of its own hash tag. rueidis retries only read-only
// commands, so a decision whose reply timed out is never replayed. On
// READONLY from a single server the store also makes the client dial
// again, to reach the primary a failover moved the address to (see
// adapter.Failed).
//
// A Store is safe for concurrent use. It does not own its client: Close
// stops the store, not the client.
type Store struct {
	engine *redisengine.Engine
}

var _ core.Store = (*Store)(nil)

// Apply decides req in one script call of its algorithm's Lua twin,
// atomic in Redis. The script is sent by EVALSHA, by EVAL once after
// Redis has lost it; TRYAGAIN is retried three times and nothing else,
// as a call that timed out may have been applied. Errors every call would
// get for now (LOADING, READONLY, OOM, a closed client; docs/outages.md)
// wrap [core.ErrUnavailable]. Under [core.Inf] no call is made.
func (s *Store) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	return s.engine.Apply(ctx, req)
}

// ApplyAll decides reqs all or nothing (see [core.Store]) in one script
// call where their keys allow it: any keys on one server, one key on a
// Cluster. Keys in several Cluster slots are decided by
// stores.ApplyInTurn: charged in turn, refunded on a denial.
func (s *Store) ApplyAll(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	return s.engine.ApplyAll(ctx, reqs, out)
}

// Reset deletes key's state under alg: the key is as if never charged.
func (s *Store) Reset(ctx context.Context, key string, alg core.Algorithm) error {
	return s.engine.Reset(ctx, key, alg)
}

// Close stops the store, whose later calls fail with [core.ErrClosed],
// once the calls it has queued are sent or their deadlines pass. The
// client stays open: it is the caller's.
func (s *Store) Close() error { return s.engine.Close() }

// Key returns the Redis key of key's state under alg: prefix, escaped key
// in braces (the hash tag) and algorithm name, as docs/redis.md lays out.
func (s *Store) Key(key string, alg core.Algorithm) string { return s.engine.Key(key, alg) }

// Prefix returns what every key the store writes begins with.
func (s *Store) Prefix() string { return s.engine.Prefix() }

// New returns a store that keeps state through client. It fails on a nil
// client or a prefix with a brace; it does not contact Redis.
func New(client rueidis.Client, cfg Config) (*Store, error) {
	return newStore(client, cfg, false)
}

// newStore is New, with every script in its portable form if portable is
// set (tests).
func newStore(client rueidis.Client, cfg Config, portable bool) (*Store, error) {
	if client == nil {
		return nil, errors.New("rueidisstore: nil client")
	}
	cluster := client.Mode() == rueidis.ClientModeCluster
	a := &adapter{client: client, single: !cluster, base: time.Now()}
	a.quitAt.Store(-int64(quitEvery))
	e, err := redisengine.New(a, redisengine.Config{
		Name: "rueidisstore", Prefix: cfg.Prefix, Merge: !cluster, Cluster: cluster,
		Down: clientDown, Portable: portable,
	})
	if err != nil {
		return nil, err
	}
	a.quit = e.Prefix() + "quit"
	return &Store{engine: e}, nil
}

// adapter sends the engine's commands through a rueidis client.
type adapter struct {
	client rueidis.Client
	single bool // a client of one server, not a Cluster
	// quitAt is when the adapter last closed its client's connections on
	// READONLY (see Failed), in ns of the monotonic clock since base.
	quitAt atomic.Int64
	base   time.Time
	quit   string // a key of the store's, which routes the QUITs
}

// Exec sends calls, a lone one as its caller's own, more in one DoMulti.
func (a *adapter) Exec(ctx context.Context, calls []*redisengine.Call) {
	if len(calls) == 1 {
		calls[0].Reply, calls[0].Err = result(a.client.Do(ctx, a.command(calls[0])))
		return
	}
	cmds := make(rueidis.Commands, len(calls))
	for i, c := range calls {
		cmds[i] = a.command(c)
	}
	for i, r := range a.client.DoMulti(ctx, cmds...) {
		calls[i].Reply, calls[i].Err = result(r)
	}
}

// command returns c's command: EVALSHA, or EVAL if c.Eval is set.
func (a *adapter) command(c *redisengine.Call) rueidis.Completed {
	n := int64(len(c.Keys))
	if c.Eval {
		return a.client.B().Eval().Script(c.Text).Numkeys(n).Key(c.Keys...).Arg(c.Args...).Build()
	}
	return a.client.B().Evalsha().Sha1(c.Text).Numkeys(n).Key(c.Keys...).Arg(c.Args...).Build()
}

// result returns a script call's reply, or its error.
func result(r rueidis.RedisResult) (string, error) {
	if err := r.Error(); rueidis.IsRedisNil(err) {
		return "", redisengine.ErrNoReply
	} else if err != nil {
		return "", err // the connection's, or the script's
	}
	reply, err := r.ToString()
	if err != nil {
		return "", fmt.Errorf("%w: %w", redisengine.ErrMalformed, err)
	}
	return reply, nil
}

// Del deletes key.
func (a *adapter) Del(ctx context.Context, key string) error {
	return a.client.Do(ctx, a.client.B().Del().Key(key).Build()).Error()
}

// quitEvery and quits bound how the store makes its client reconnect on
// READONLY (see Failed): at most once a quitEvery, by quits calls.
const (
	quitEvery = 100 * time.Millisecond
	quits     = 16
)

// Failed makes the client reconnect on a READONLY reply from a single
// server. A server that answers READONLY was a primary and is now a
// replica: a failover repointed the address the client dialed (a DNS
// name, a Kubernetes Service, a proxy) at the new primary, but rueidis
// keeps the connections it has, and would write to the replica until
// restarted. So the store sends QUIT on them, each after a command on a
// key, as rueidis spreads those at random over its connections to a
// server (2 to 4 by default): the server closes each, and rueidis dials
// the address again on its next call. It does so at most once every
// 100 ms, with 16 QUITs, for a client of up to 4 connections all but
// certainly closing each; a connection missed is closed on the next
// READONLY. Calls under way on a connection that closes fail, as they
// would have on the replica; a Cluster client follows its own redirects
// and is left alone. The caller whose call met READONLY waits for the
// QUITs (a round trip), within its context.
func (a *adapter) Failed(ctx context.Context, err error) {
	if code, _ := redisengine.Code(err); code != "READONLY" || !a.single {
		return
	}
	now := int64(time.Since(a.base))
	if last := a.quitAt.Load(); now-last >= int64(quitEvery) && a.quitAt.CompareAndSwap(last, now) {
		a.reconnect(ctx)
	}
}

// reconnect closes the client's connections to its server (see Failed).
func (a *adapter) reconnect(ctx context.Context) {
	var wg sync.WaitGroup
	for range quits {
		wg.Go(func() {
			a.client.DoMulti(ctx, a.client.B().Exists().Key(a.quit).Build(), a.client.B().Quit().Build())
		})
	}
	wg.Wait()
}
