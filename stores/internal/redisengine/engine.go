package redisengine

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores"
)

// maxMerge is the most requests one merged call of
// algorithms.MultiScript decides (a larger stack goes alone). Redis runs
// nothing else while a script runs: 128 decisions take it a few hundred
// µs.
const maxMerge = 128

// Client is what an adapter of a Redis client does for the engine: send
// script calls, and delete a key. It knows nothing of sluice's scripts,
// keys or replies.
type Client interface {
	// Exec sends calls in one round trip (a pipeline), each its script
	// by EVALSHA of its Text, the script's hash, or by EVAL of its Text,
	// the script's source, where its Eval is set, on its Keys and Args.
	// It leaves in each call the script's string reply in Reply, or the
	// client's error in Err, as the client returned it: [ErrNoReply] for
	// a nil reply, one wrapping [ErrMalformed] for a reply that is not a
	// string. No command may ever be sent twice: a call whose reply timed
	// out may have been applied. ctx is the round's (see
	// [Config].Detach).
	Exec(ctx context.Context, calls []*Call)
	// Del deletes key.
	Del(ctx context.Context, key string) error
	// Failed is told of the error of each call that failed, after the
	// engine's retries and marks, so that the adapter may repair its
	// client: a go-redis Cluster client reads its slots again, a rueidis
	// client of one server reconnects after READONLY.
	Failed(ctx context.Context, err error)
}

// Config configures an [Engine] for its adapter.
type Config struct {
	// Name starts the engine's errors: the store's package name.
	Name string
	// Prefix is the store's configured prefix (see [Prefix]).
	Prefix string
	// Merge has the calls of concurrent callers that are queued together
	// sent as one call of algorithms.MultiScript, a group each: for a
	// client of one server, where any keys share a script call.
	Merge bool
	// Cluster says that a batch's keys must share a Cluster slot to be
	// decided in one call (see [Engine.ApplyAll]).
	Cluster bool
	// Detach sends a round without its callers' deadlines, bounded by the
	// client's own timeouts, with the values of its first caller's
	// context: for a client that closes the connection of a call whose
	// context ended (go-redis). Otherwise a round of one call runs on its
	// caller's context, and a larger one until every caller's context
	// has ended.
	Detach bool
	// Down are the client's own errors that any call would get while the
	// client stays as it is (closed, its pool exhausted): the engine marks
	// them unavailable, as it does Redis's replies of the kind.
	Down []error
	// Portable sends every script in its portable form
	// ([algorithms.Script.Portable]) from the start, as the engine does
	// by itself once a server lacks Lua's struct library: for tests.
	Portable bool
}

// Engine does a Redis store's work once for both clients: it validates
// requests, packs keys and arguments, merges the decisions of concurrent
// callers (on one server), sends scripts by EVALSHA with EVAL once on
// NOSCRIPT and the portable form on a server without Lua's struct
// library, sends TRYAGAIN again, marks errors, and checks replies. Its
// [Client] only sends commands. An Engine is a [core.Store], safe for
// concurrent use; the Redis stores embed it.
type Engine struct {
	client   Client
	name     string
	prefix   string
	merge    bool
	cluster  bool
	detach   bool
	down     []error
	portable atomic.Bool // the server's Lua has no struct library
	closed   atomic.Bool
	front    *stores.Front
}

var _ stores.Fronted = (*Engine)(nil)

// New returns an engine sending through client. It fails on a prefix
// [Prefix] refuses.
func New(client Client, cfg Config) (*Engine, error) {
	prefix, err := Prefix(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Name, err)
	}
	e := &Engine{client: client, name: cfg.Name, prefix: prefix, merge: cfg.Merge, cluster: cfg.Cluster, detach: cfg.Detach, down: cfg.Down}
	e.portable.Store(cfg.Portable)
	e.front = stores.NewFront(e.decide, cfg.Detach)
	return e, nil
}

// Call is one script call: a decision, a stack's decisions, or the
// decisions of several callers merged. The engine fills in what to send;
// the adapter's Exec leaves the result.
type Call struct {
	// Eval sends Text, the script's source, by EVAL; otherwise Text is
	// its hash, for EVALSHA.
	Eval bool
	// Text is the script's hash or source.
	Text string
	// Keys and Args are the script's KEYS and ARGV.
	Keys, Args []string
	// Reply is the script's reply, set by Exec.
	Reply string
	// Err is the call's error, set by Exec.
	Err error

	owner  *core.Call         // the caller's call it decides; nil for a merged call
	one    [1]*Call           // the call alone, as a round
	script *algorithms.Script // the script, in Redis's form
	algs   string             // each request's algorithms.MultiIndex, a byte each; "": not to Merge
	n      int                // a merged call's requests
	key    [1]string
	args   [3]string
	buf    [192]byte
	batch  batch // a stack's or a merged call's keys and requests, kept when freed
}

// size returns the number of requests the call decides.
func (c *Call) size() int {
	if len(c.batch.members) > 0 {
		return c.n
	}
	return len(c.Keys)
}

// Prefix returns the prefix of every key the store writes.
func (e *Engine) Prefix() string { return e.prefix }

// Key returns the Redis key under which the store keeps key's state under
// alg: the prefix, key escaped in braces (its Cluster hash tag), and the
// algorithm's name; docs/redis.md has the layout.
func (e *Engine) Key(key string, alg core.Algorithm) string { return Key(e.prefix, key, alg.Name()) }

// Apply decides req with its algorithm's Lua twin, atomically, in one
// round trip: EVALSHA, and EVAL once if Redis does not have the script
// (after a restart, a failover or SCRIPT FLUSH), which is safe because a
// missing script ran nothing. A call Redis answers TRYAGAIN (a Cluster
// slot's keys moving) is sent again up to three times, 7 ms in all; no
// other failure is retried, as a call whose reply timed out may have been
// applied. Requests under [core.Inf] are allowed without a call.
//
// An error that any call would get while Redis, or the client, stays as
// it is (LOADING, READONLY, OOM, NOPERM, WRONGPASS, a closed client, a
// failed TLS handshake; docs/outages.md has the table) wraps
// [core.ErrUnavailable], which a policy.Breaker answers by its mode; the
// client's error stays on the chain.
func (e *Engine) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	if err := req.Validate(); err != nil {
		return core.Decision{}, err
	}
	return e.apply(ctx, req)
}

// apply is Apply for a request validated already.
func (e *Engine) apply(ctx context.Context, req core.Request) (core.Decision, error) {
	switch {
	case e.closed.Load():
		return core.Decision{}, core.ErrClosed
	case req.Limit.IsInf():
		return req.Answer(core.Unlimited()), nil
	}
	return e.front.Apply(ctx, req)
}

// calls holds the calls of decisions that were answered, for the next
// decisions: a call answered is in no round and no client any more.
var calls = sync.Pool{New: func() any { return new(Call) }}

// free hands c, answered, to the next decision.
func (c *Call) free() {
	b := c.batch
	b.reset()
	*c = Call{}
	c.batch = b
	calls.Put(c)
}

// encode returns the call deciding req with script: the key and the
// packed request share the call's buffer, not written again until the
// call has been answered.
func (e *Engine) encode(req *core.Request, script *algorithms.Script) *Call {
	c := calls.Get().(*Call)
	alg := req.Algorithm.Name()
	buf := c.buf[:0]
	if n := len(e.prefix) + 3*len(req.Key) + len(alg) + 4 + ArgsLen; n > len(c.buf) {
		buf = make([]byte, 0, n)
	}
	buf = AppendKey(buf, e.prefix, req.Key, alg)
	n := len(buf)
	buf = AppendArgs(buf, req)
	c.key[0] = unsafe.String(&buf[0], n)
	c.args[0] = unsafe.String(&buf[n], len(buf)-n)
	c.Keys, c.Args, c.script = c.key[:], c.args[:1], script
	if idx := algorithms.MultiIndex(req.Algorithm); idx != 0 {
		c.algs = Alg(idx)
	}
	return c
}

// ApplyAll decides reqs together (see [core.Store]) in one call of
// algorithms.MultiScript, all or nothing, whatever their operation
// (charges, peeks, refunds, reservations, concurrency leases): on a
// single Redis always, and on a Cluster when every request is for one key
// (and so one slot), such as a burst limit and a daily quota on one user.
// Otherwise, or for an algorithm of your own, it decides in turn and
// refunds ([stores.ApplyInTurn]): charges are then briefly visible to
// other callers. Requests under [core.Inf] are allowed without a call.
func (e *Engine) ApplyAll(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	if err := stores.ValidateAll(reqs, out); err != nil {
		return err
	}
	if e.closed.Load() {
		return core.ErrClosed
	}
	asked := false
	for i := range reqs {
		r := &reqs[i]
		if r.Limit.IsInf() {
			continue
		}
		if algorithms.MultiIndex(r.Algorithm) == 0 || e.cluster && r.Key != reqs[0].Key {
			return stores.ApplyInTurn(ctx, validated{e}, reqs, out)
		}
		asked = true
	}
	if !asked {
		for i := range reqs {
			out[i] = reqs[i].Answer(core.Unlimited())
		}
		return nil
	}
	return e.front.ApplyAll(ctx, reqs, out)
}

// ApplyBatch decides calls, each a request or a group, as Apply and
// ApplyAll decide them, in one round trip: on a single Redis, every call
// that may be merged goes in one call of algorithms.MultiScript, a group
// each; on a Cluster, each call is a script call of its own, all
// pipelined. A group that must be decided in turn (see ApplyAll) is
// decided through the store's own front, beside the batch.
func (e *Engine) ApplyBatch(ctx context.Context, calls []*core.Call) {
	held := batches.Get().(*[]*core.Call)
	valid := (*held)[:0]
	closed := e.closed.Load()
	for _, c := range calls {
		switch {
		case len(c.Reqs) == 1 && len(c.Out) == 1:
			c.Err = c.Reqs[0].Validate()
		default:
			c.Err = stores.ValidateAll(c.Reqs, c.Out)
		}
		if c.Err == nil && closed {
			c.Err = core.ErrClosed
		}
		if c.Err == nil {
			valid = append(valid, c)
		}
	}
	if len(valid) > 0 {
		e.decide(ctx, valid)
	}
	clear(valid)
	*held = valid[:0]
	batches.Put(held)
}

// batches holds the slices of valid calls ApplyBatch makes, for the next
// batch.
var batches = sync.Pool{New: func() any { return new([]*core.Call) }}

// Front returns the front the store's callers' calls gather in.
func (e *Engine) Front() *stores.Front { return e.front }

// decide decides calls validated already, in one round: each is encoded
// as a script call, and the round sent (see send), sent again where Redis
// answered TRYAGAIN, and each reply decoded into its call's decisions. A
// group under an algorithm without a twin in algorithms.MultiScript, or
// on a Cluster with keys of several slots, is decided in turn
// (stores.ApplyInTurn) on a goroutine of its own, through the front:
// never so from the front's own batches, whose ApplyAll decides such
// groups before they queue.
func (e *Engine) decide(ctx context.Context, batch []*core.Call) {
	held := rounds.Get().(*[]*Call)
	round := (*held)[:0]
	var inTurn sync.WaitGroup
	for _, cc := range batch {
		if len(cc.Reqs) == 1 && len(cc.Out) == 1 {
			req := &cc.Reqs[0]
			script, err := scriptOf(req)
			switch {
			case err != nil:
				cc.Err = err
			case script == nil:
				cc.Out[0] = req.Answer(core.Unlimited())
			default:
				c := e.encode(req, script)
				c.owner = cc
				round = append(round, c)
			}
			continue
		}
		c := calls.Get().(*Call)
		switch ok := c.together(e.prefix, cc.Reqs, cc.Out, e.cluster); {
		case !ok:
			c.free()
			inTurn.Go(func() { cc.Err = stores.ApplyInTurn(cc.Ctx, validated{e}, cc.Reqs, cc.Out) })
		case len(c.batch.at) == 0: // all under core.Inf, answered
			c.free()
		default:
			c.owner = cc
			round = append(round, c)
		}
	}
	if len(round) > 0 {
		e.round(ctx, round)
	}
	for i, c := range round {
		e.answer(ctx, c)
		round[i] = nil
	}
	*held = round[:0]
	rounds.Put(held)
	inTurn.Wait()
}

// round sends calls as one round trip, and again, up to three times, those
// Redis answered TRYAGAIN (see retryTryAgain).
func (e *Engine) round(ctx context.Context, calls []*Call) {
	e.send(ctx, calls)
	var again []*Call
	for n := 0; ; n++ {
		again = again[:0]
		for _, c := range calls {
			if tryAgain(c.Err) {
				again = append(again, c)
			}
		}
		if len(again) == 0 || !waitTryAgain(ctx, n) {
			return
		}
		for _, c := range again {
			c.Reply, c.Err = "", nil
		}
		e.send(ctx, again)
		calls = again
	}
}

// answer decodes c's reply into its caller's call, or leaves its error
// there, marked and wrapped, having told the client of it. A call that
// failed is left to the collector: it may still be in the client.
func (e *Engine) answer(ctx context.Context, c *Call) {
	cc := c.owner
	err := c.Err
	if err == nil {
		if len(cc.Reqs) == 1 && len(cc.Out) == 1 {
			cc.Out[0], err = decodeOne(c.Reply)
		} else {
			err = Place(c.Reply, c.batch.at, cc.Out)
		}
	}
	if err == nil {
		c.free()
		return
	}
	if c.Err != nil {
		e.client.Failed(ctx, err)
	}
	if len(cc.Reqs) == 1 && len(cc.Out) == 1 {
		cc.Err = fmt.Errorf("%s: %s: %w", e.name, cc.Reqs[0].Algorithm.Name(), err)
	} else {
		cc.Err = fmt.Errorf("%s: multi: %w", e.name, err)
	}
}

// Reset forgets key's state under alg, as if it had never been charged.
func (e *Engine) Reset(ctx context.Context, key string, alg core.Algorithm) error {
	if err := stores.ValidateReset(key, alg); err != nil {
		return err
	}
	if e.closed.Load() {
		return core.ErrClosed
	}
	if err := e.client.Del(ctx, Key(e.prefix, key, alg.Name())); err != nil {
		err = mark(err, e.down)
		e.client.Failed(ctx, err)
		return fmt.Errorf("%s: reset: %w", e.name, err)
	}
	return nil
}

// Close stops the store: later calls fail with [core.ErrClosed]. It waits
// for the rounds already queued, each bounded by its callers' deadlines
// or the client's timeouts. It does not close the client, which the
// caller owns.
func (e *Engine) Close() error {
	e.closed.Store(true)
	e.front.Close()
	return nil
}

// send sends calls as one round trip. On one server (Merge) the calls of a round that may be
// merged go in runs of up to maxMerge requests, each run one call of
// algorithms.MultiScript with a group a call (a run of one call as that
// call's own script); other calls go as they are.
func (e *Engine) send(ctx context.Context, round []*Call) {
	if len(round) == 1 {
		c := round[0]
		c.one[0] = c
		e.exec(ctx, c.one[:])
		c.one[0] = nil
		return
	}
	held := rounds.Get().(*[]*Call)
	sent := (*held)[:0]
	var run *Call
	for _, c := range round {
		if !e.merge || c.algs == "" || c.size() > maxMerge {
			sent = append(sent, c)
			continue
		}
		if run == nil || run.n+c.size() > maxMerge {
			run = calls.Get().(*Call)
			run.script = algorithms.MultiScript()
			sent = append(sent, run)
		}
		run.batch.members = append(run.batch.members, c)
		run.n += c.size()
	}
	// A run of one call goes as that call; the runs, which are the
	// engine's, are kept after the calls sent, to be freed.
	n := len(sent)
	for i, c := range sent[:n] {
		switch {
		case len(c.batch.members) == 1:
			sent[i] = c.batch.members[0]
			sent = append(sent, c)
		case len(c.batch.members) > 1:
			c.build()
			sent = append(sent, c)
		}
	}
	e.exec(ctx, sent[:n])
	for _, c := range sent[n:] {
		if len(c.batch.members) > 1 {
			c.split()
		}
		if c.Err == nil { // else the client may hold it still
			c.free()
		}
	}
	clear(sent)
	*held = sent[:0]
	rounds.Put(held)
}

// rounds holds the slices of calls that send makes for a round, for the
// next round.
var rounds = sync.Pool{New: func() any { return new([]*Call) }}

// build fills in the merged call's keys and arguments, in its batch: its
// calls' keys, and their requests and algorithms one after another, a
// group a call.
func (m *Call) build() {
	b := &m.batch
	b.merge.Grow(m.n)
	for _, c := range b.members {
		b.keys = append(b.keys, c.Keys...)
		b.merge.Add(c.Args[0], c.algs)
	}
	packed, algs, groups := b.merge.Args()
	m.Keys, m.args = b.keys, [3]string{packed, algs, groups}
	m.Args = m.args[:]
}

// split hands each call of a merged call its part of the reply, ten
// numbers a request, or the merged call's error.
func (m *Call) split() {
	reply, err := m.Reply, m.Err
	if err == nil {
		err = check(reply, m.n)
	}
	for _, c := range m.batch.members {
		if err != nil {
			c.Err = err
			continue
		}
		c.Reply, reply = cut(reply, c.size())
	}
}

// exec sends calls through the client: EVALSHA, then EVAL for those that
// found Redis without their script (a missing script ran nothing), and
// the portable form for those that found a Lua without the struct
// library (which failed before anything of theirs ran). It marks each
// call's error where it is received.
func (e *Engine) exec(ctx context.Context, calls []*Call) {
	portable := e.portable.Load()
	for _, c := range calls {
		s := c.script
		if portable {
			s = s.Portable()
		}
		c.Eval, c.Text = false, s.Hash()
	}
	e.client.Exec(ctx, calls)
	var again []*Call
	for range 2 { // NOSCRIPT, then the struct library missing
		again = again[:0]
		for _, c := range calls {
			if c.Err == nil {
				continue
			}
			switch code, _ := Code(c.Err); {
			case code == "NOSCRIPT" && !c.Eval:
				c.Eval, c.Text = true, e.form(c.script).Source()
			case code == "ERR" && noStruct(c.Err) && c.Text != c.script.Portable().Source():
				e.portable.Store(true)
				c.Eval, c.Text = true, c.script.Portable().Source()
			default:
				c.Err = mark(c.Err, e.down)
				continue
			}
			c.Reply, c.Err = "", nil
			again = append(again, c)
		}
		if len(again) == 0 {
			return
		}
		e.client.Exec(ctx, again)
		calls = again
	}
	for _, c := range calls {
		c.Err = mark(c.Err, e.down)
	}
}

// form returns the form of script the server runs.
func (e *Engine) form(script *algorithms.Script) *algorithms.Script {
	if e.portable.Load() {
		return script.Portable()
	}
	return script
}

// noStruct reports whether err is a script's failure for want of Lua's
// struct library, which Redis has and miniredis lacks.
func noStruct(err error) bool {
	msg, _ := reply(err)
	return strings.Contains(msg, "nonexistent global variable 'struct'")
}

// validated is the engine for requests validated already: ApplyAll's, by
// stores.ValidateAll, when it decides them in turn.
type validated struct{ *Engine }

// Apply decides req without validating it again.
func (v validated) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	return v.apply(ctx, req)
}
