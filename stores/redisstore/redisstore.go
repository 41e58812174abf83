package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/wire"
)

// Config configures a [Store]. The zero Config is ready to use.
type Config struct {
	// Prefix starts every key the store writes, to keep sluice's keys
	// apart from an application's. It must not contain a brace (see
	// docs/redis.md for the key layout). The default is "sluice:".
	Prefix string
	// Logger receives the one warning New may give: that the client's
	// options let it retry a command after a timeout, which can charge a
	// decision twice. The default is [slog.Default].
	Logger *slog.Logger
}

// Store keeps limiter state in Redis through a go-redis client and decides
// each request with its algorithm's Lua twin, atomically, in one round
// trip. It works with every [redis.UniversalClient]: a single server,
// Sentinel, or Redis Cluster, where each key's state lives in the slot of
// its own hash tag.
//
// A Store is safe for concurrent use. It does not own its client: Close
// stops the store, not the client.
type Store struct {
	client redis.UniversalClient
	prefix string
	closed atomic.Bool
}

var (
	_ core.Store    = (*Store)(nil)
	_ core.Resetter = (*Store)(nil)
)

// New returns a store that keeps state through client. It fails on a nil
// client or a prefix with a brace; it does not contact Redis, so it
// neither fails nor waits while Redis is down.
//
// When client is a [*redis.Client], [*redis.ClusterClient] or [*redis.Ring]
// whose options let it retry commands (MaxRetries is not -1), New logs a
// warning: go-redis retries a command whose reply timed out, and a script
// that had already run is then charged twice. Set MaxRetries to -1.
func New(client redis.UniversalClient, cfg Config) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client")
	}
	prefix := cfg.Prefix
	if prefix == "" {
		prefix = wire.DefaultPrefix
	}
	if err := wire.CheckPrefix(prefix); err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	if retries, ok := maxRetries(client); ok && retries > 0 {
		logger := cfg.Logger
		if logger == nil {
			logger = slog.Default()
		}
		logger.Warn("redisstore: the client retries commands that timed out, which can charge a decision twice; set its MaxRetries to -1", "maxRetries", retries)
	}
	return &Store{client: client, prefix: prefix}, nil
}

// maxRetries returns the retries the clients that have a MaxRetries
// option make; go-redis has turned -1 into 0 and 0 into its default, 3.
func maxRetries(client redis.UniversalClient) (int, bool) {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().MaxRetries, true
	case *redis.ClusterClient:
		return c.Options().MaxRetries, true
	case *redis.Ring:
		return c.Options().MaxRetries, true
	}
	return 0, false
}

// Apply decides req with its algorithm's Lua twin: EVALSHA, and EVAL once
// if Redis does not have the script (after a restart, a failover or SCRIPT
// FLUSH), which is safe because a missing script ran nothing. No other
// failure is retried: a call that timed out may have been applied.
// Requests under [core.Inf] are allowed without a call.
func (s *Store) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	if err := req.Validate(); err != nil {
		return core.Decision{}, err
	}
	if s.closed.Load() {
		return core.Decision{}, core.ErrClosed
	}
	if req.Limit.IsInf() {
		return core.Unlimited(), nil
	}
	script, err := wire.Script(req.Algorithm)
	if err != nil {
		return core.Decision{}, fmt.Errorf("redisstore: %w", err)
	}
	c := s.encode(&req, script)
	cmd := s.client.Do(ctx, c.args[:]...)
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		c.args[0], c.args[1] = "eval", script.Source()
		cmd = s.client.Do(ctx, c.args[:]...)
	}
	reply, err := cmd.Result()
	if err != nil {
		return core.Decision{}, fmt.Errorf("redisstore: %s: %w", req.Algorithm.Name(), err)
	}
	d, err := decode(reply)
	if err != nil {
		return core.Decision{}, fmt.Errorf("redisstore: %s: %w", req.Algorithm.Name(), err)
	}
	return d, nil
}

// call is one decision's command in one allocation. go-redis takes
// arguments as interfaces, and boxing a string allocates where boxing a
// pointer does not; it writes a *string as the string.
type call struct {
	args           [5]any // EVALSHA hash 1 key request
	hash, key, req string
	buf            [192]byte
}

// encode returns the EVALSHA command deciding req with script. The key
// and the packed request share one buffer, never written again.
func (s *Store) encode(req *core.Request, script *core.Script) *call {
	c := new(call)
	alg := req.Algorithm.Name()
	buf := c.buf[:0]
	if n := len(s.prefix) + 3*len(req.Key) + len(alg) + 4 + wire.ArgsLen; n > len(c.buf) {
		buf = make([]byte, 0, n)
	}
	buf = wire.AppendKey(buf, s.prefix, req.Key, alg)
	n := len(buf)
	buf = wire.AppendArgs(buf, req)
	c.hash = script.Hash()
	c.key = unsafe.String(&buf[0], n)
	c.req = unsafe.String(&buf[n], len(buf)-n)
	// The key count is a string: go-redis's Cluster routing reads it as
	// one, and would format a number.
	c.args = [5]any{"evalsha", &c.hash, "1", &c.key, &c.req}
	return c
}

// decode checks a script's reply, as go-redis parsed it.
func decode(reply any) (core.Decision, error) {
	vals, ok := reply.([]any)
	if !ok || len(vals) != wire.ReplyLen {
		return core.Decision{}, fmt.Errorf("%w: %T %v", wire.ErrMalformed, reply, reply)
	}
	var ints [wire.ReplyLen]int64
	for i, v := range vals {
		n, ok := v.(int64)
		if !ok {
			return core.Decision{}, fmt.Errorf("%w: element %d is %T %v", wire.ErrMalformed, i, v, v)
		}
		ints[i] = n
	}
	return wire.Decision(ints)
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
	if err := s.client.Del(ctx, wire.Key(s.prefix, key, alg.Name())).Err(); err != nil {
		return fmt.Errorf("redisstore: reset: %w", err)
	}
	return nil
}

// Prefix returns the prefix of every key the store writes.
func (s *Store) Prefix() string { return s.prefix }

// Close stops the store: later calls fail with [core.ErrClosed]. It does
// not close the client, which the caller owns.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}
