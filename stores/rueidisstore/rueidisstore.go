package rueidisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/redis/rueidis"

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

// clientDown are rueidis's own errors that any call would get while the
// client stays as it is: it is closed or cannot connect, or a Cluster
// slot has no node. The store marks them, as it does Redis's replies of
// the kind, with core.ErrUnavailable.
var clientDown = []error{rueidis.ErrClosing, rueidis.ErrNoSlot}

// Config configures a [Store]. The zero Config is ready to use.
type Config struct {
	// Prefix starts every key the store writes, to keep sluice's keys
	// apart from an application's. It must not contain a brace (see
	// docs/redis.md for the key layout). The default is "sluice:".
	Prefix string
}

// Store keeps limiter state in Redis through a rueidis client and decides
// each request with its algorithm's Lua twin, atomically, in one round
// trip. rueidis pipelines concurrent calls on shared connections, so many
// goroutines' decisions travel together; on a single server, decisions
// and stacks beyond 16 in flight wait to be merged into one script call
// (algorithms.MultiScript), which costs Redis less per decision. It works
// with a single server,
// Sentinel or Redis Cluster, where each key's state lives in the slot of
// its own hash tag.
//
// A Store is safe for concurrent use. It does not own its client: Close
// stops the store, not the client.
type Store struct {
	client rueidis.Client
	prefix string
	closed atomic.Bool
	merges bool            // one node: concurrent decisions share a script call
	queue  callqueue.Queue // the decisions to merge
	// quitAt is when the store last closed its client's connections on
	// READONLY (see mark), in ns of the monotonic clock since base.
	quitAt atomic.Int64
	base   time.Time
}

var _ core.Store = (*Store)(nil)

// New returns a store that keeps state through client. It fails on a nil
// client or a prefix with a brace; it does not contact Redis.
//
// rueidis retries only read-only commands, so a decision whose reply timed
// out is never replayed.
func New(client rueidis.Client, cfg Config) (*Store, error) {
	if client == nil {
		return nil, errors.New("rueidisstore: nil client")
	}
	prefix, err := redisscript.Prefix(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("rueidisstore: %w", err)
	}
	s := &Store{client: client, prefix: prefix, merges: client.Mode() != rueidis.ClientModeCluster, base: time.Now()}
	s.quitAt.Store(-int64(quitEvery))
	s.queue.Send, s.queue.Senders, s.queue.Inline = s.send, mergeSenders, true
	return s, nil
}

// Apply decides req with its algorithm's Lua twin: EVALSHA, and EVAL once
// if Redis does not have the script (after a restart, a failover or SCRIPT
// FLUSH), which is safe because a missing script ran nothing. No other
// failure is retried: a call that timed out may have been applied.
// Requests under [core.Inf] are allowed without a call.
//
// An error that any call would get while Redis, or the client, stays as
// it is (LOADING, READONLY, OOM, NOPERM, WRONGPASS, a closed client, a
// failed TLS handshake; docs/outages.md has the table) wraps
// [core.ErrUnavailable], which a policy.Breaker answers by its mode; the
// client's error stays on the chain. On READONLY from a single server the
// store also makes the client dial again, to reach the primary a failover
// moved the address to (see mark).
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
	key, args := s.encode(&req)
	var d core.Decision
	if idx := algorithms.MultiIndex(req.Algorithm); s.merges && idx != 0 {
		var reply string
		reply, err = s.decide(ctx, &call{script: script, key: key, req: args, algs: redisscript.Alg(idx)})
		if err == nil {
			d, err = decodeReply(reply)
		}
		err = s.mark(ctx, err)
	} else {
		d, err = decode(s.script(ctx, script, []string{key}, args))
	}
	if err != nil {
		return core.Decision{}, fmt.Errorf("rueidisstore: %s: %w", req.Algorithm.Name(), err)
	}
	return d, nil
}

// script runs script on keys and args with EVALSHA, and EVAL once if
// Redis does not have it, which is safe because a missing script ran
// nothing. It is the one place either kind of call (a decision, a batch)
// meets NOSCRIPT and TRYAGAIN (sent again up to three times, 7 ms in
// all, while a Cluster slot's keys move: rediserr.RetryTryAgain), and
// where its errors are marked with core.ErrUnavailable when any call
// would get them (rediserr.Mark): the result it returns holds the error,
// marked or not, in place of the reply.
func (s *Store) script(ctx context.Context, script *algorithms.Script, keys []string, args ...string) rueidis.RedisResult {
	res := s.evalsha(ctx, script, keys, args)
	err := res.Error()
	for n := 0; err != nil && rediserr.RetryTryAgain(ctx, err, n); n++ {
		res = s.evalsha(ctx, script, keys, args)
		err = res.Error()
	}
	if err != nil && !rueidis.IsRedisNil(err) {
		res = rueidis.NewResult(rueidis.RedisMessage{}, s.mark(ctx, err))
	}
	return res
}

// quitEvery and quits bound how the store makes its client reconnect on
// READONLY (see mark): at most once a quitEvery, by quits calls.
const (
	quitEvery = 100 * time.Millisecond
	quits     = 16
)

// mark marks err with core.ErrUnavailable where any call would get it
// (rediserr.Mark), and, on a READONLY reply from a single server, makes
// the client reconnect. A server that answers READONLY was a primary and
// is now a replica: a failover repointed the address the client dialed (a
// DNS name, a Kubernetes Service, a proxy) at the new primary, but
// rueidis keeps the connections it has, and would write to the replica
// until restarted. So the store sends QUIT on them, each after a command
// on a key, as rueidis spreads those at random over its connections to a
// server (2 to 4 by default): the server closes each, and rueidis dials
// the address again on its next call. It does so at most once every
// 100 ms, with 16 QUITs, for a client of up to 4 connections all but
// certainly closing each; a connection missed is closed on the next
// READONLY. Calls under way on a connection that closes fail, as they
// would have on the replica; a Cluster client follows its own redirects
// and is left alone. The caller whose call met READONLY waits for the
// QUITs (a round trip), within its context.
func (s *Store) mark(ctx context.Context, err error) error {
	if err == nil {
		return nil // every decision passes here: no look at a nil error's chain
	}
	// merges is set for a client of one server, not a Cluster.
	if code, _ := rediserr.Code(err); code == "READONLY" && s.merges {
		now := int64(time.Since(s.base))
		if last := s.quitAt.Load(); now-last >= int64(quitEvery) && s.quitAt.CompareAndSwap(last, now) {
			s.reconnect(ctx)
		}
	}
	return rediserr.Mark(err, clientDown)
}

// reconnect closes the client's connections to its server (see mark).
func (s *Store) reconnect(ctx context.Context) {
	var wg sync.WaitGroup
	key := s.prefix + "quit"
	for range quits {
		wg.Go(func() {
			s.client.DoMulti(ctx, s.client.B().Exists().Key(key).Build(), s.client.B().Quit().Build())
		})
	}
	wg.Wait()
}

// evalsha runs script with EVALSHA, and EVAL once if Redis does not have
// it.
func (s *Store) evalsha(ctx context.Context, script *algorithms.Script, keys, args []string) rueidis.RedisResult {
	n := int64(len(keys))
	res := s.client.Do(ctx, s.client.B().Evalsha().Sha1(script.Hash()).Numkeys(n).Key(keys...).Arg(args...).Build())
	if re, ok := rueidis.IsRedisErr(res.Error()); ok && re.IsNoScript() {
		res = s.client.Do(ctx, s.client.B().Eval().Script(script.Source()).Numkeys(n).Key(keys...).Arg(args...).Build())
	}
	return res
}

// encode returns the key and the packed request, two strings over one
// allocation.
func (s *Store) encode(req *core.Request) (key, args string) {
	alg := req.Algorithm.Name()
	buf := make([]byte, 0, len(s.prefix)+3*len(req.Key)+len(alg)+4+redisscript.ArgsLen)
	buf = redisscript.AppendKey(buf, s.prefix, req.Key, alg)
	n := len(buf)
	buf = redisscript.AppendArgs(buf, req)
	// buf is never written again, so the strings may share it.
	return unsafe.String(&buf[0], n), unsafe.String(&buf[n], len(buf)-n)
}

// decode checks a script's reply.
func decode(res rueidis.RedisResult) (core.Decision, error) {
	if err := res.Error(); rueidis.IsRedisNil(err) {
		return core.Decision{}, fmt.Errorf("%w: no reply", redisscript.ErrMalformed)
	} else if err != nil {
		return core.Decision{}, err // the connection's, or the script's
	}
	reply, err := res.ToString()
	if err != nil {
		return core.Decision{}, fmt.Errorf("%w: %w", redisscript.ErrMalformed, err)
	}
	return decodeReply(reply)
}

// decodeReply checks one decision's packed reply.
func decodeReply(reply string) (core.Decision, error) {
	if len(reply) != redisscript.ReplySize {
		return core.Decision{}, fmt.Errorf("%w: %d bytes", redisscript.ErrMalformed, len(reply))
	}
	return redisscript.Decode(reply)
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
	k := redisscript.Key(s.prefix, key, alg.Name())
	if err := s.client.Do(ctx, s.client.B().Del().Key(k).Build()).Error(); err != nil {
		return fmt.Errorf("rueidisstore: reset: %w", s.mark(ctx, err))
	}
	return nil
}

// Prefix returns the prefix of every key the store writes.
func (s *Store) Prefix() string { return s.prefix }

// Close stops the store: later calls fail with [core.ErrClosed]. It waits
// for the merged calls already queued, each bounded by its callers'
// deadlines (or, for callers without one, by the client). It does not
// close the client, which the caller owns.
func (s *Store) Close() error {
	s.closed.Store(true)
	s.queue.Close()
	return nil
}
