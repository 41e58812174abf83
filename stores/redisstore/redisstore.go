package redisstore

import (
	"context"
	"errors"
	"fmt"

	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"

	"github.com/sluicehq/sluice/stores/internal/redisengine"
)

// ErrMalformed reports a script reply that breaks the calling convention
// of [algorithms.Script]: not ten packed integers, or numbers no decision
// can hold. Apply wraps it with what it received.
var ErrMalformed = redisengine.ErrMalformed

// ErrClientOption reports a go-redis client option that would defeat the
// store's bounds on a call: [New] and [Store.CheckDeadline] wrap it,
// naming the option and the value to give it.
var ErrClientOption = errors.New("redisstore: unsafe client option")

// clientDown are go-redis's own errors that any call would get while the
// client stays as it is: every connection of its pool is taken (for
// longer than its PoolTimeout, or up to its MaxActiveConns), or it is
// closed. The store marks them, as it does Redis's replies of the kind,
// with core.ErrUnavailable.
var clientDown = []error{redis.ErrPoolTimeout, redis.ErrPoolExhausted, redis.ErrClosed}

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

// Store keeps limiter state in Redis through a go-redis client and decides
// each request with its algorithm's Lua twin, atomically, in one round
// trip. It works with every [redis.UniversalClient]: a single server,
// Sentinel, or Redis Cluster, where each key's state lives in the slot of
// its own hash tag. It shares its engine, the Redis work of both stores,
// with rueidisstore; only the client differs.
//
// The store sends the decisions of concurrent callers together: one
// pipeline in flight at a time, carrying every decision that arrived
// during the previous round trip, on a single server merged into one
// script call (algorithms.MultiScript). Under load that costs the client
// and Redis a fraction of the CPU of one command per decision. Each
// caller returns as soon as its own context ends, whatever the client's
// options, and a call whose context has ended before its pipeline is
// written is not sent. A pipeline is not any one
// caller's: it runs without its callers' deadlines, bounded by the
// client's ReadTimeout and WriteTimeout, so that a caller giving up at its
// deadline does not cost the connection (go-redis closes a connection
// whose call timed out), and with the values of its first caller's
// context. The client's hooks, such as redisotel's, thus see a pipeline
// per round trip of decisions ("redis.pipeline evalsha"), in the trace of the
// first caller who waited for it: a lone caller's in its own. No command
// is retried, whatever the client's MaxRetries and MaxRedirects: a call
// whose reply timed out may have been applied, and go-redis would
// otherwise send it again.
//
// A Store is safe for concurrent use. It does not own its client: Close
// stops the store, not the client.
type Store struct {
	engine *redisengine.Engine
	read   time.Duration // the client's ReadTimeout, as go-redis applies it; 0: unknown
	pool   time.Duration // the client's PoolTimeout, likewise
}

var _ core.Store = (*Store)(nil)

// Apply decides req with its algorithm's Lua twin, atomically, in one
// round trip (EVALSHA, and EVAL once if Redis lost the script). A call
// answered TRYAGAIN is sent again up to three times; no other failure is
// retried, since a call whose reply timed out may have been applied. An
// error that any call would get while Redis or the client stays as it is
// (LOADING, READONLY, OOM, a closed client; docs/outages.md) wraps
// [core.ErrUnavailable]. Requests under [core.Inf] are allowed without a
// call.
func (s *Store) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	return s.engine.Apply(ctx, req)
}

// ApplyAll decides reqs together, all or nothing (see [core.Store]), in
// one script call: on a single server always, and on a Cluster when every
// request is for one key. Otherwise it decides in turn and refunds
// (stores.ApplyInTurn), and charges are briefly visible to others.
func (s *Store) ApplyAll(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	return s.engine.ApplyAll(ctx, reqs, out)
}

// Reset forgets key's state under alg, as if it had never been charged.
func (s *Store) Reset(ctx context.Context, key string, alg core.Algorithm) error {
	return s.engine.Reset(ctx, key, alg)
}

// Close stops the store: later calls fail with [core.ErrClosed]. It waits
// for the calls already queued, each bounded by its callers' deadlines or
// the client's timeouts, and does not close the client.
func (s *Store) Close() error { return s.engine.Close() }

// Key returns the Redis key under which the store keeps key's state under
// alg: the prefix, key escaped in braces (its Cluster hash tag), and the
// algorithm's name (docs/redis.md).
func (s *Store) Key(key string, alg core.Algorithm) string { return s.engine.Key(key, alg) }

// Prefix returns the prefix of every key the store writes.
func (s *Store) Prefix() string { return s.engine.Prefix() }

// New returns a store that keeps state through client. It fails on a nil
// client or a prefix with a brace, and with an error wrapping
// [ErrClientOption] for a client without read or write deadlines
// (ReadTimeout or WriteTimeout -1 or -2): the store's pipelines run
// without their callers' deadlines, bounded by those, and a pipeline to a
// Redis that stopped answering would hold its connection, and Close,
// forever. The client's MaxRetries may be anything: the store's commands
// are never retried. New does not contact Redis, so it neither fails nor
// waits while Redis is down.
func New(client redis.UniversalClient, cfg Config) (*Store, error) {
	return newStore(client, cfg, false)
}

// newStore is New, with every script in its portable form if portable is
// set (tests).
func newStore(client redis.UniversalClient, cfg Config, portable bool) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client")
	}
	s := &Store{}
	if t, ok := timeoutsOf(client); ok {
		switch {
		case t.read == 0:
			return nil, noDeadline("ReadTimeout")
		case t.write == 0:
			return nil, noDeadline("WriteTimeout")
		}
		s.read, s.pool = t.read, t.pool
	}
	_, single := client.(*redis.Client) // one node: any keys share a script call
	var cluster bool
	switch client.(type) {
	case *redis.ClusterClient, *redis.Ring:
		cluster = true
	}
	var err error
	s.engine, err = redisengine.New(adapter{client}, redisengine.Config{
		Name: "redisstore", Prefix: cfg.Prefix, Merge: single, Cluster: cluster,
		Detach: true, Down: clientDown, Portable: portable,
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// noDeadline is New's error for a client whose option sets no deadline.
func noDeadline(option string) error {
	return fmt.Errorf("%w: the client's %s sets no deadline (-1 or -2): a pipeline sent to a Redis that stops answering would never end, nor would Close; give %[2]s a duration, such as 500ms (docs/redis.md)",
		ErrClientOption, option)
}

// CheckDeadline reports whether the client lets a call wait for a
// connection as long as it waits for a reply, up to d, a per-call
// deadline such as a policy.Breaker's; [policy.NewBreaker] calls it with
// its deadline. It fails, wrapping [ErrClientOption], when the client's
// PoolTimeout is shorter than both d and its ReadTimeout: a call queued
// behind the client's own calls would then fail sooner than one Redis is
// slow to answer, and the client's queueing, on a healthy Redis, would
// count as Redis's failure and could open the circuit. go-redis's default
// PoolTimeout, its ReadTimeout and a second, always passes.
func (s *Store) CheckDeadline(d time.Duration) error {
	if need := min(d, s.read); s.pool > 0 && s.pool < need {
		return fmt.Errorf("%w: the client's PoolTimeout (%v) is shorter than the per-call deadline (%v) and its ReadTimeout (%v): a call waiting for a connection would fail before its deadline; set PoolTimeout to at least %v",
			ErrClientOption, s.pool, d, s.read, need)
	}
	return nil
}

// timeouts are a go-redis client's timeouts, as go-redis applies them to
// each of its connections.
type timeouts struct {
	read, write time.Duration // each call's read and write deadlines; 0: none
	pool        time.Duration // the longest a call waits for a connection
}

// defaultReadTimeout is go-redis's ReadTimeout when the options give 0.
const defaultReadTimeout = 5 * time.Second

// timeoutsOf returns client's timeouts, and false for a client that is
// not one of go-redis's own kinds.
func timeoutsOf(client redis.UniversalClient) (timeouts, bool) {
	switch c := client.(type) {
	case *redis.Client:
		// The options as NewClient completed them: 0 and less are none
		// (the -1 and -2 that were given).
		o := c.Options()
		return timeouts{read: max(o.ReadTimeout, 0), write: max(o.WriteTimeout, 0), pool: o.PoolTimeout}, true
	case *redis.ClusterClient:
		// NewClusterClient turns -1 into 0, which each node's client then
		// completes as it does a 0 it was given: -2 alone is none.
		o := c.Options()
		return nodeTimeouts(o.ReadTimeout, o.WriteTimeout, o.PoolTimeout), true
	case *redis.Ring:
		o := c.Options()
		return nodeTimeouts(o.ReadTimeout, o.WriteTimeout, o.PoolTimeout), true
	}
	return timeouts{}, false
}

// nodeTimeouts completes the timeouts that a Cluster or Ring client hands
// each node's client, as redis.NewClient does: a read timeout of 0 is
// 5 s, a write timeout of 0 the read timeout, a negative one none; a pool
// timeout of 0 is the read timeout and a second, or 30 s without one.
func nodeTimeouts(read, write, pool time.Duration) timeouts {
	switch {
	case read == 0:
		read = defaultReadTimeout
	case read < 0:
		read = 0
	}
	switch {
	case write == 0:
		write = read
	case write < 0:
		write = 0
	}
	if pool == 0 {
		pool = 30 * time.Second
		if read > 0 {
			pool = read + time.Second
		}
	}
	return timeouts{read: read, write: write, pool: pool}
}

// adapter sends the engine's commands through a go-redis client.
type adapter struct {
	client redis.UniversalClient
}

// reloadOnFailure has a Cluster client read the slot map again after a
// call that Redis did not answer (a refused or dropped connection, a
// timeout): the key's master may be gone. go-redis looks again by itself
// only on MOVED, or every ClusterStateReloadInterval (a minute by
// default), and the store retries nothing, so without this a promoted
// replica would go unused for up to that long. go-redis runs one reload
// at a time, at most one every 200 ms.
func (a adapter) Failed(ctx context.Context, err error) {
	cluster, ok := a.client.(*redis.ClusterClient)
	var answered redis.Error
	if !ok || ctx.Err() != nil || errors.As(err, &answered) {
		return
	}
	cluster.ReloadState(ctx)
}

// Del deletes key.
func (a adapter) Del(ctx context.Context, key string) error {
	return a.client.Del(ctx, key).Err()
}

// command is one script call's go-redis command, which go-redis never
// sends twice: it retries a command whose reply timed out or whose
// connection dropped (the client's MaxRetries, a Cluster client's
// MaxRedirects), and a decision sent twice may be charged twice.
type command struct {
	redis.Cmd
	argv [5]any // EVALSHA hash 1 key request: one decision's
}

// NoRetry tells go-redis not to retry the command.
func (*command) NoRetry() bool { return true }

// Exec sends calls as one pipeline. go-redis takes arguments as
// interfaces, and boxing a string allocates where boxing a pointer does
// not; it writes a *string as the string.
func (a adapter) Exec(ctx context.Context, calls []*redisengine.Call) {
	cmds := make([]command, len(calls))
	pipe := a.client.Pipeline()
	for i, c := range calls {
		argv := cmds[i].argv[:0]
		if n := 3 + len(c.Keys) + len(c.Args); n > len(cmds[i].argv) {
			argv = make([]any, 0, n)
		}
		var name any = "evalsha" // constants: boxing them allocates nothing
		if c.Eval {
			name = "eval"
		}
		// The key count is a string: go-redis's Cluster routing reads it
		// as one, and would format a number.
		numkeys := any("1")
		if len(c.Keys) != 1 {
			numkeys = strconv.Itoa(len(c.Keys))
		}
		argv = append(argv, name, &c.Text, numkeys)
		for j := range c.Keys {
			argv = append(argv, &c.Keys[j])
		}
		for j := range c.Args {
			argv = append(argv, &c.Args[j])
		}
		cmds[i].Cmd = *redis.NewCmd(ctx, argv...)
		_ = pipe.Process(ctx, &cmds[i])
	}
	_, err := pipe.Exec(ctx)
	for i, c := range calls {
		reply, cerr := cmds[i].Result()
		switch s, ok := reply.(string); {
		case cerr == nil && reply == nil && err != nil:
			// go-redis gives each command its own reply or error, but
			// for an error reply to the connection's handshake (a wrong
			// password): that is the pipeline's error alone.
			c.Err = err
		case errors.Is(cerr, redis.Nil):
			c.Err = redisengine.ErrNoReply
		case cerr != nil:
			c.Err = cerr
		case !ok:
			c.Err = fmt.Errorf("%w: %T %v", redisengine.ErrMalformed, reply, reply)
		default:
			c.Reply = s
		}
	}
}
