package redisengine

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
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
	queue    Queue
}

var _ core.Store = (*Engine)(nil)

// New returns an engine sending through client. It fails on a prefix
// [Prefix] refuses.
func New(client Client, cfg Config) (*Engine, error) {
	prefix, err := Prefix(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Name, err)
	}
	e := &Engine{client: client, name: cfg.Name, prefix: prefix, merge: cfg.Merge, cluster: cfg.Cluster, detach: cfg.Detach, down: cfg.Down}
	e.portable.Store(cfg.Portable)
	e.queue.Send = e.send
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

	entry  Entry              // the call's place in the queue
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
	script, err := scriptOf(&req)
	switch {
	case err != nil:
		return core.Decision{}, err
	case e.closed.Load():
		return core.Decision{}, core.ErrClosed
	case script == nil:
		return req.Answer(core.Unlimited()), nil
	}
	c := e.encode(&req, script)
	err = e.do(ctx, c)
	var d core.Decision
	if err == nil {
		d, err = decodeOne(c.Reply)
	}
	if err != nil {
		// The call may still be in a round, or in the client: it is left
		// to the collector.
		return core.Decision{}, fmt.Errorf("%s: %s: %w", e.name, req.Algorithm.Name(), err)
	}
	c.free()
	return d, nil
}

// calls holds the calls of decisions that were answered, for the next
// decisions: a call answered is in no round and no client any more.
var calls = sync.Pool{New: func() any { return new(Call) }}

// free hands c, answered, to the next decision.
func (c *Call) free() {
	done := c.entry.done // the channel, empty, serves the next caller
	b := c.batch
	b.reset()
	*c = Call{}
	c.entry.done, c.batch = done, b
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
	c := calls.Get().(*Call)
	ok := c.together(e.prefix, reqs, out, e.cluster)
	if !ok || len(c.batch.at) == 0 {
		c.free()
		if !ok {
			return stores.ApplyInTurn(ctx, validated{e}, reqs, out)
		}
		return nil
	}
	err := e.do(ctx, c)
	if err == nil {
		err = Place(c.Reply, c.batch.at, out)
	}
	if err != nil {
		// As in apply: the call may still be in a round, or in the client.
		return fmt.Errorf("%s: multi: %w", e.name, err)
	}
	c.free()
	return nil
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
	e.queue.Close()
	return nil
}

// do queues c, to be sent with the calls of concurrent callers, and
// returns its error, marked, or ctx's if ctx ends first. It is the one
// place where a call meets TRYAGAIN: sent again up to three times, 7 ms in
// all, while a Cluster slot's keys move (retryTryAgain).
func (e *Engine) do(ctx context.Context, c *Call) error {
	c.entry.Item = c
	for n := 0; ; n++ {
		c.Reply, c.Err = "", nil
		err := e.queue.Do(ctx, &c.entry)
		if err == nil {
			err = c.Err
		}
		if err == nil {
			return nil
		}
		if retryTryAgain(ctx, err, n) {
			continue
		}
		e.client.Failed(ctx, err)
		return err
	}
}

// send sends a round of queued calls whose callers still wait, as one
// round trip. On one server (Merge) the calls of a round that may be
// merged go in runs of up to maxMerge requests, each run one call of
// algorithms.MultiScript with a group a call (a run of one call as that
// call's own script); other calls go as they are.
func (e *Engine) send(round []*Entry) {
	ctx, stop := e.roundContext(round)
	defer stop()
	if len(round) == 1 {
		c := round[0].Item.(*Call)
		c.one[0] = c
		e.exec(ctx, c.one[:])
		c.one[0] = nil
		return
	}
	held := rounds.Get().(*[]*Call)
	sent := (*held)[:0]
	var run *Call
	for _, qe := range round {
		c := qe.Item.(*Call)
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

// roundContext returns the context a round is sent on (see
// [Config].Detach), and what releases it.
func (e *Engine) roundContext(round []*Entry) (context.Context, func()) {
	switch {
	case e.detach:
		return context.WithoutCancel(round[0].Ctx), func() {}
	case len(round) == 1:
		return round[0].Ctx, func() {}
	}
	return lastContext(round)
}

// lastContext returns the context of a round of calls: the values of its
// first caller's context, ending once every caller's has ended. Contexts
// that all end at a deadline end the round at the last of them, without
// registering with any; if one ends without a deadline (a request's, a
// breaker's, which ends on the process's clock), the round registers
// with one caller's context at a time (see [watch]). A caller whose
// context never ends leaves the round unbounded but for the client's own
// timeouts. stop releases what the context holds.
func lastContext(round []*Entry) (ctx context.Context, stop func()) {
	ctx = context.WithoutCancel(round[0].Ctx)
	var last time.Time
	watched := false
	for _, c := range round {
		d, ok := c.Ctx.Deadline()
		switch {
		case ok:
			if d.After(last) {
				last = d
			}
		case c.Ctx.Done() == nil:
			return ctx, func() {}
		default:
			watched = true
		}
	}
	if watched {
		return watch(ctx, round)
	}
	return context.WithDeadline(ctx, last)
}

// watch returns ctx, ending once every context of round has ended. It
// registers with one caller's context at a time (context.AfterFunc), and
// when that one ends, with the next still running: a round that comes
// back before its callers give up, as on a healthy server, registers
// once, where registering with each caller's context cost one a caller.
// With callers on contexts of their own, as a server's requests are,
// those registrations and their release took 15 % of rueidisstore's
// client CPU at 64 goroutines. stop must be called before round is used
// again.
func watch(ctx context.Context, round []*Entry) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	w := &watcher{round: round, cancel: cancel}
	w.mu.Lock()
	w.watchNext()
	w.mu.Unlock()
	return ctx, w.stop
}

// watcher ends a round's context once its callers' have ended.
type watcher struct {
	mu      sync.Mutex
	round   []*Entry // nil once stopped
	next    int      // the first caller whose context may still run
	unwatch func() bool
	cancel  context.CancelFunc
}

// watchNext registers with the first caller's context, from next, that
// has not ended, or ends the round's if none is left. w.mu is held.
func (w *watcher) watchNext() {
	for ; w.next < len(w.round); w.next++ {
		if c := w.round[w.next].Ctx; c.Err() == nil {
			w.unwatch = context.AfterFunc(c, w.ended)
			return
		}
	}
	w.cancel()
}

// ended is called once the watched context has ended.
func (w *watcher) ended() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.round != nil {
		w.watchNext()
	}
}

// stop releases the round, which its sender may use again once stop has
// returned, and the context.
func (w *watcher) stop() {
	w.mu.Lock()
	w.round = nil
	if w.unwatch != nil {
		w.unwatch()
	}
	w.mu.Unlock()
	w.cancel()
}

// validated is the engine for requests validated already: ApplyAll's, by
// stores.ValidateAll, when it decides them in turn.
type validated struct{ *Engine }

// Apply decides req without validating it again.
func (v validated) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	return v.apply(ctx, req)
}
