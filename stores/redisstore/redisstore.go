package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redisscript"
)

// ErrMalformed reports a script reply that breaks the calling convention
// of [algorithms.Script]: not six integers, or numbers no decision can hold.
// Apply wraps it with what it received.
var ErrMalformed = redisscript.ErrMalformed

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
	closed atomic.Bool
	pipe   pipeliner
}

var _ core.Store = (*Store)(nil)

// New returns a store that keeps state through client. It fails on a nil
// client or a prefix with a brace; it does not contact Redis, so it
// neither fails nor waits while Redis is down.
func New(client redis.UniversalClient, cfg Config) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client")
	}
	prefix, err := redisscript.Prefix(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	s := &Store{client: client, prefix: prefix}
	s.pipe.client = client
	return s, nil
}

// Apply decides req with its algorithm's Lua twin: EVALSHA, and EVAL once
// if Redis does not have the script (after a restart, a failover or SCRIPT
// FLUSH), which is safe because a missing script ran nothing. No other
// failure is retried, whatever the client's MaxRetries and MaxRedirects: a
// call whose reply timed out may have been applied, and go-redis would
// otherwise send it again. Requests under [core.Inf] are allowed without a
// call.
func (s *Store) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	script, err := redisscript.Script(&req)
	switch {
	case err != nil:
		return core.Decision{}, err
	case s.closed.Load():
		return core.Decision{}, core.ErrClosed
	case script == nil:
		return core.Unlimited(), nil
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
// meets NOSCRIPT. A call Redis did not answer has a Cluster client read
// its slot map again (see reloadOnFailure).
func (s *Store) script(ctx context.Context, c *call, script *algorithms.Script) (any, error) {
	reply, err := s.run(ctx, c)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		c.args[0], c.args[1] = "eval", script.Source()
		reply, err = s.run(ctx, c)
	}
	switch {
	case errors.Is(err, redis.Nil):
		return nil, fmt.Errorf("%w: no reply", redisscript.ErrMalformed)
	case err != nil:
		s.reloadOnFailure(ctx, err)
		return nil, err
	}
	return reply, nil
}

// call is one decision's command in one allocation. go-redis takes
// arguments as interfaces, and boxing a string allocates where boxing a
// pointer does not; it writes a *string as the string.
type call struct {
	args           []any  // EVALSHA hash numkeys keys... args...
	inline         [5]any // args of a single decision: EVALSHA hash 1 key request
	hash, key, req string
	cmd            noRetry
	ctx            context.Context // the caller's, while a pipeline holds cmd
	done           chan struct{}   // closed once a pipeline has sent cmd
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
	return c
}

// decode checks a script's reply, as go-redis parsed it.
func decode(reply any) (core.Decision, error) {
	vals, ok := reply.([]any)
	if !ok || len(vals) != redisscript.ReplyLen {
		return core.Decision{}, fmt.Errorf("%w: %T %v", redisscript.ErrMalformed, reply, reply)
	}
	var ints [redisscript.ReplyLen]int64
	for i, v := range vals {
		n, ok := v.(int64)
		if !ok {
			return core.Decision{}, fmt.Errorf("%w: element %d is %T %v", redisscript.ErrMalformed, i, v, v)
		}
		ints[i] = n
	}
	return redisscript.Decision(ints)
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
		return fmt.Errorf("redisstore: reset: %w", err)
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
	s.pipe.close()
	return nil
}
