package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/callqueue"
	"github.com/sluicehq/sluice/internal/rediserr"
	"github.com/sluicehq/sluice/internal/redisscript"
)

// ErrMalformed reports a script reply that breaks the calling convention
// of [algorithms.Script]: not ten packed integers, or numbers no decision
// can hold. Apply wraps it with what it received.
var ErrMalformed = redisscript.ErrMalformed

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

// Config configures a [Store]. The zero Config is ready to use.
type Config struct {
	// Prefix starts every key the store writes, to keep sluice's keys
	// apart from an application's. It must not contain a brace (see
	// docs/redis.md for the key layout). The default is "sluice:".
	Prefix string
}

// Store keeps limiter state in Redis through a go-redis client and decides
// each request with its algorithm's Lua twin, atomically, in one round
// trip. It works with every [redis.UniversalClient]: a single server,
// Sentinel, or Redis Cluster, where each key's state lives in the slot of
// its own hash tag.
//
// The store sends the decisions of concurrent callers together, in
// pipelines (up to 4 in flight), as rueidis does by itself: under load
// about twice the decisions per second of one command per decision, for
// the same Redis. Each caller returns as soon as its own context ends,
// whatever the client's options, and a call whose context has ended
// before its pipeline is written is not sent. A pipeline is not any one
// caller's: it runs without its callers' deadlines, bounded by the
// client's ReadTimeout and WriteTimeout, so that a caller giving up at its
// deadline does not cost the connection (go-redis closes a connection
// whose call timed out), and with the values of its first caller's
// context. The client's hooks, such as redisotel's, thus see a pipeline
// per batch of decisions ("redis.pipeline evalsha"), in the trace of the
// first caller who waited for it: a lone caller's in its own.
//
// A Store is safe for concurrent use. It does not own its client: Close
// stops the store, not the client.
type Store struct {
	client redis.UniversalClient
	prefix string
	read   time.Duration // the client's ReadTimeout, as go-redis applies it; 0: unknown
	pool   time.Duration // the client's PoolTimeout, likewise
	closed atomic.Bool
	pipe   pipeliner
}

var _ core.Store = (*Store)(nil)

// New returns a store that keeps state through client. It fails on a nil
// client or a prefix with a brace, and with an error wrapping
// [ErrClientOption] for a client without read or write deadlines
// (ReadTimeout or WriteTimeout -1 or -2): the store's pipelines run
// without their callers' deadlines, bounded by those, and a pipeline to a
// Redis that stopped answering would hold its connection, and Close,
// forever. The client's MaxRetries may be anything: the store's commands
// are never retried (see [Store.Apply]). New does not contact Redis, so
// it neither fails nor waits while Redis is down.
func New(client redis.UniversalClient, cfg Config) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client")
	}
	prefix, err := redisscript.Prefix(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	s := &Store{client: client, prefix: prefix}
	if t, ok := timeoutsOf(client); ok {
		switch {
		case t.read == 0:
			return nil, noDeadline("ReadTimeout")
		case t.write == 0:
			return nil, noDeadline("WriteTimeout")
		}
		s.read, s.pool = t.read, t.pool
	}
	s.pipe.client = client
	_, s.pipe.merges = client.(*redis.Client) // one node: any keys share a script call
	s.pipe.queue.Send = s.pipe.send
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

// Apply decides req with its algorithm's Lua twin: EVALSHA, and EVAL once
// if Redis does not have the script (after a restart, a failover or SCRIPT
// FLUSH), which is safe because a missing script ran nothing. No other
// failure is retried, whatever the client's MaxRetries and MaxRedirects: a
// call whose reply timed out may have been applied, and go-redis would
// otherwise send it again. Requests under [core.Inf] are allowed without a
// call.
//
// An error that any call would get while Redis, or the client, stays as
// it is (LOADING, READONLY, OOM, NOPERM, WRONGPASS, the pool's timeout, a
// failed TLS handshake; docs/outages.md has the table) wraps
// [core.ErrUnavailable], which a policy.Breaker answers by its mode; the
// client's error stays on the chain.
func (s *Store) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	script, err := redisscript.Script(&req)
	switch {
	case err != nil:
		return core.Decision{}, err
	case s.closed.Load():
		return core.Decision{}, core.ErrClosed
	case script == nil:
		return req.Answer(core.Unlimited()), nil
	}
	reply, err := s.script(ctx, s.encode(&req, script), script)
	if err != nil {
		return core.Decision{}, fmt.Errorf("redisstore: %s: %w", req.Algorithm.Name(), err)
	}
	d, err := decode(reply)
	if err != nil {
		return core.Decision{}, fmt.Errorf("redisstore: %s: %w", req.Algorithm.Name(), err)
	}
	return d, nil
}

// reloadOnFailure has a Cluster client read the slot map again after a
// call that Redis did not answer (a refused or dropped connection, a
// timeout): the key's master may be gone. go-redis looks again by itself
// only on MOVED, or every ClusterStateReloadInterval (a minute by
// default), and the store retries nothing, so without this a promoted
// replica would go unused for up to that long. go-redis runs one reload
// at a time, at most one every 200 ms.
func (s *Store) reloadOnFailure(ctx context.Context, err error) {
	cluster, ok := s.client.(*redis.ClusterClient)
	var answered redis.Error
	if !ok || ctx.Err() != nil || errors.As(err, &answered) {
		return
	}
	cluster.ReloadState(ctx)
}

// script runs c, a script's EVALSHA command, and EVAL once if Redis does
// not have the script, which is safe because a missing script ran
// nothing. It is the one place either kind of call (a decision, a batch)
// meets NOSCRIPT and TRYAGAIN (sent again up to three times, 7 ms in
// all, while a Cluster slot's keys move: rediserr.RetryTryAgain), and
// where its errors are marked with core.ErrUnavailable when any call
// would get them (rediserr.Mark). A call Redis did not answer has a
// Cluster client read its slot map again (see reloadOnFailure).
func (s *Store) script(ctx context.Context, c *call, script *algorithms.Script) (any, error) {
	reply, err := s.evalsha(ctx, c, script)
	for n := 0; err != nil && rediserr.RetryTryAgain(ctx, err, n); n++ {
		reply, err = s.evalsha(ctx, c, script)
	}
	switch {
	case errors.Is(err, redis.Nil):
		return nil, fmt.Errorf("%w: no reply", redisscript.ErrMalformed)
	case err != nil:
		s.reloadOnFailure(ctx, err)
		return nil, rediserr.Mark(err, clientDown)
	}
	return reply, nil
}

// evalsha runs c, and EVAL once if Redis does not have the script.
func (s *Store) evalsha(ctx context.Context, c *call, script *algorithms.Script) (any, error) {
	reply, err := s.run(ctx, c)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		c.args[0], c.args[1] = "eval", script.Source()
		c.algs = "" // sent alone: its own EVAL
		reply, err = s.run(ctx, c)
	}
	return reply, err
}

// size returns the number of requests the call decides.
func (c *call) size() int {
	if c.keys != nil {
		return len(c.keys)
	}
	return 1
}

// call is one decision's command in one allocation. go-redis takes
// arguments as interfaces, and boxing a string allocates where boxing a
// pointer does not; it writes a *string as the string.
type call struct {
	args           []any    // EVALSHA hash numkeys keys... args...
	inline         [5]any   // args of a single decision: EVALSHA hash 1 key request
	hash, key, req string   // req: the packed requests
	keys           []string // a stack's keys; nil for one decision's (key)
	algs           string   // each request's algorithms.MultiIndex, a byte each; "": not to merge
	merged         bool     // sent in a MultiScript call with others, which has the reply
	cmd            noRetry
	callqueue.Call // the caller's place in the pipeliner's queue
	buf            [192]byte
}

// noRetry is a command go-redis never sends twice. go-redis retries a
// command whose reply timed out or whose connection dropped (the client's
// MaxRetries, a Cluster client's MaxRedirects), and a decision sent twice
// may be charged twice.
type noRetry struct{ *redis.Cmd }

// NoRetry tells go-redis not to retry the command.
func (noRetry) NoRetry() bool { return true }

// run sends the call's command in a pipeline and returns its reply.
func (s *Store) run(ctx context.Context, c *call) (any, error) {
	c.cmd = noRetry{redis.NewCmd(ctx, c.args...)}
	return s.pipe.do(ctx, c)
}

// encode returns the EVALSHA command deciding req with script. The key
// and the packed request share one buffer, never written again.
func (s *Store) encode(req *core.Request, script *algorithms.Script) *call {
	c := new(call)
	alg := req.Algorithm.Name()
	buf := c.buf[:0]
	if n := len(s.prefix) + 3*len(req.Key) + len(alg) + 4 + redisscript.ArgsLen; n > len(c.buf) {
		buf = make([]byte, 0, n)
	}
	buf = redisscript.AppendKey(buf, s.prefix, req.Key, alg)
	n := len(buf)
	buf = redisscript.AppendArgs(buf, req)
	c.hash = script.Hash()
	c.key = unsafe.String(&buf[0], n)
	c.req = unsafe.String(&buf[n], len(buf)-n)
	// The key count is a string: go-redis's Cluster routing reads it as
	// one, and would format a number.
	c.inline = [5]any{"evalsha", &c.hash, "1", &c.key, &c.req}
	c.args = c.inline[:]
	if idx := algorithms.MultiIndex(req.Algorithm); idx != 0 {
		c.algs = redisscript.Alg(idx)
	}
	return c
}

// decode checks a script's reply, as go-redis parsed it: a packed reply.
func decode(reply any) (core.Decision, error) {
	packed, ok := reply.(string)
	if !ok || len(packed) != redisscript.ReplySize {
		return core.Decision{}, fmt.Errorf("%w: %T %v", redisscript.ErrMalformed, reply, reply)
	}
	return redisscript.Decode(packed)
}

// Reset forgets key's state under alg, as if it had never been charged.
func (s *Store) Reset(ctx context.Context, key string, alg core.Algorithm) error {
	if err := core.ValidateKey(key); err != nil {
		return err
	}
	if alg == nil {
		return core.ErrNoAlgorithm
	}
	if s.closed.Load() {
		return core.ErrClosed
	}
	if err := s.client.Del(ctx, redisscript.Key(s.prefix, key, alg.Name())).Err(); err != nil {
		return fmt.Errorf("redisstore: reset: %w", rediserr.Mark(err, clientDown))
	}
	return nil
}

// Prefix returns the prefix of every key the store writes.
func (s *Store) Prefix() string { return s.prefix }

// Close stops the store: later calls fail with [core.ErrClosed]. It waits
// for the pipelines already queued, each bounded by the client's
// timeouts. It does not close the client, which the caller
// owns.
func (s *Store) Close() error {
	s.closed.Store(true)
	s.pipe.queue.Close()
	return nil
}
