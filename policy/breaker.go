package policy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores"
)

// State is the state of a [Breaker]'s circuit.
type State uint8

// The states of a circuit.
const (
	// Closed: every call goes to the store.
	Closed State = iota
	// HalfOpen: the open timeout has passed; a few calls (the probes) go
	// to the store, and the others get the mode's answer.
	HalfOpen
	// Open: no call goes to the store; every decision is the mode's.
	Open
)

var stateNames = [...]string{"closed", "half-open", "open"}

// String returns "closed", "half-open" or "open".
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

func stateOf(s gobreaker.State) State {
	switch s {
	case gobreaker.StateOpen:
		return Open
	case gobreaker.StateHalfOpen:
		return HalfOpen
	}
	return Closed
}

// Change is a change of a circuit's state, as [WithOnChange] reports it.
type Change struct {
	Name     string    // the breaker's name (see [WithName])
	From, To State     // the states before and after
	At       time.Time // when the state changed: calls made later are decided by To
	// Cause is, for a change to Open, the store's error in the last
	// failure counted before it (a timeout's is context.DeadlineExceeded,
	// wrapped); nil for other changes.
	Cause error
}

// Counts are the outcomes of the calls that the trip rule's ratio weighs
// ([WithTrip]): those that ended within the last window ([WithWindow]) of
// the process clock, since the circuit last changed state. Excluded
// calls are those whose outcome did not count: the caller gave up, or
// the request was refused.
type Counts struct {
	Successes uint32
	Failures  uint32
	Excluded  uint32
}

// Stats are a breaker's totals since it was made. A batch
// ([Breaker.ApplyAll]) is one call, and counts once in each.
type Stats struct {
	// Calls counts the calls sent to the store.
	Calls uint64
	// Failures counts the calls that failed as the store's failure (see
	// [IsStoreFailure]), each answered by the mode.
	Failures uint64
	// Rejected counts the calls the mode answered without asking the
	// store: the circuit was open, half-open with its probes under way,
	// or in its slow start with the calls in flight at their cap.
	Rejected uint64
	// Gone counts the calls whose caller's context ended (cancelled, or
	// its own deadline passed) before the store answered, before the
	// call or during it: each returned the context's error, and the
	// circuit counted it neither as a success nor as a failure.
	Gone uint64
	// Excused counts the calls that timed out before this process had
	// run for their deadline (it stalled beyond a second): each was
	// answered by the mode, and the circuit did not count it.
	Excused uint64
	// Changes counts the changes of state.
	Changes uint64
}

// Outcomes reported to gobreaker: a success is a nil error, a failure a
// *countedFailure, and errExcluded one it leaves out.
var errExcluded = errors.New("policy: not counted")

// countedFailure is a failure reported to gobreaker: the store's error,
// and whether the call timed out.
type countedFailure struct {
	err    error
	lapsed bool
}

func (f *countedFailure) Error() string {
	if f.err == nil {
		return "policy: store failure"
	}
	return "policy: store failure: " + f.err.Error()
}

// Breaker is a [core.Store] that guards a remote store (Redis) with a
// circuit breaker, and answers by its [Mode] the decisions the store
// cannot make. Make one with [NewBreaker]; share one Breaker among all the
// limiters that use one Redis, giving each the mode it needs with
// [Breaker.WithMode].
//
// Each call to the store runs under a per-call deadline ([WithTimeout]),
// kept on the process clock and adapted to the store's recent latency.
// A call that fails as the store's failure (see [IsStoreFailure]) is
// counted, and answered by the mode with a nil error; once failures trip
// the circuit ([WithTrip]) it opens, and for [WithOpenTimeout] no call
// reaches the store: every decision is the mode's, at the cost of an
// atomic load and a clock read. Then the circuit is half-open: a few
// probes ([WithProbes]) go to the store, and their successes close it,
// a failure opens it again.
//
// While the store is steady, each call runs on the caller's goroutine,
// under a context that carries the caller's values and ends at the
// per-call deadline: a client honouring its context returns by then, and
// the call costs a share of an allocation (its context comes from a
// slab) and no timer; while nothing fails, no
// lock either: gobreaker is told only of the calls that may change the
// circuit's state (fast.go), and the breaker counts every call's outcome
// in its window, on the process clock (tally.go). The caller's cancellation
// is seen before the call and after it, not during it: the call runs
// until the store answers, one round trip in the steady state, or the
// deadline passes, and the caller then gets its context's error. From a
// call that fails, but for the odd call timing out under load, until a
// window passes without another failure, and while the circuit is not
// closed or has just closed, each call runs on a
// goroutine of its own, which the caller waits for until the deadline or
// its cancellation: the caller returns by then even if the client does
// not honour its context (rueidis holds callers while it reconnects, and
// once its queue is full of calls abandoned at their deadline). Such a
// call may go on for up to four deadlines without its caller, so that a
// connection being opened or a script being loaded after a restart is
// ready for the next call; a client that holds it longer returns it by
// its own timeouts, or at its Close. Like any call that times out, a call
// cut off at its deadline may have been applied.
//
// After the circuit closes, a slow start caps the calls in flight to the
// store: at first the number of probes, then one more for each answer
// (which doubles the cap every round trip), until it reaches 1024 or a
// window has passed; calls over the cap get the mode's answer. Without it
// every caller would rush a client whose connections all died with the
// outage; the handshakes, all at once, outlast the deadline, and the
// circuit opens again. For the same reason the circuit does not trip
// within a tenth of the window after closing, or after [NewBreaker] (see
// [WithTrip]).
//
// A batch ([Breaker.ApplyAll], which a sluice.Stack of several rules
// calls) is one call of the store and of the circuit, and is answered
// as a whole: while the store cannot decide, the mode answers every
// request of the batch alike, so that a stack's verdict never mixes the
// store's answers with the mode's.
//
// What never counts, and is returned to the caller as an error: a request
// that is invalid or unsupported (the store's error, or
// [core.Request.Validate]'s), a call whose caller's context ended (the
// error wraps the context's), and any other error of the store, such as
// a malformed reply. A denial is a success.
//
// A Breaker is safe for concurrent use. It runs one goroutine of its
// own, the stall meter behind its process clock (see [WithTimeout]),
// which rests while no calls are made and ends at Close; beyond it, and
// the goroutines of calls made while the store is not steady, it starts
// none.
type Breaker struct {
	remote    core.Store
	cfg       config
	cb        *gobreaker.CircuitBreaker[struct{}]
	base      time.Time  // the origin of the monotonic instants below
	meter     *meter     // the process clock
	deadlines *deadlines // calls' deadlines, on the process clock

	state       atomic.Uint32              // State, as of the last change
	openUntil   atomic.Int64               // ns after base at which an open circuit lets probes through
	closedAt    atomic.Int64               // the process clock when the circuit last closed, or NewBreaker ran
	run         failureRun                 // the current run of failures, on the process clock; under gobreaker's lock
	cause       error                      // the store's error in the last failure gobreaker counted; under its lock
	failedAt    atomic.Int64               // the process clock when the latest failure happened (its deadline's end, for a timeout)
	steadyAfter atomic.Int64               // ns after base from which calls may run inline (see steady)
	gen         atomic.Pointer[generation] // gobreaker's current generation
	outcomes    atomic.Uint64              // gobreaker's counted failures<<1, | 1 if its last counted outcome failed (see fast.go)
	tally       *outcomeTally              // the window's outcomes, on the process clock
	ramp        atomic.Int64               // the slow start's cap on calls in flight; 0: none
	inflight    atomic.Int64               // calls in flight to the store
	changes     atomic.Uint64

	// Every call adds to calls, so it has a cache line of its own: on the
	// line of the fields above, which every call reads, each call on one
	// core would make the next on another core read them from memory.
	_     [cacheLine]byte
	calls atomic.Uint64
	_     [cacheLine]byte

	failures atomic.Uint64
	rejected atomic.Uint64
	gone     atomic.Uint64
	excused  atomic.Uint64
	notes    notifier

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

var (
	_ core.Store = (*Breaker)(nil)
	_ core.Store = (*View)(nil)
)

// NewBreaker returns a breaker in front of remote, closed, configured by
// opts. It fails with an error wrapping [core.ErrNoStore] for a nil
// remote, or [ErrInvalidOption] for an option out of range or a per-call
// deadline that a store's client would cut short (see
// [DeadlineChecker]). It does not
// contact the store, so it neither fails nor waits while Redis is down:
// the first decisions then follow the mode.
func NewBreaker(remote core.Store, opts ...BreakerOption) (*Breaker, error) {
	if remote == nil {
		return nil, fmt.Errorf("policy: %w", core.ErrNoStore)
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := checkStores(remote, cfg.timeout); err != nil {
		return nil, err
	}
	b := &Breaker{remote: remote, cfg: cfg, base: time.Now()}
	ceiling := cfg.maxTimeout
	if ceiling == 0 {
		ceiling = max(DefaultMaxTimeout, cfg.timeout)
	}
	b.deadlines = newDeadlines(cfg.timeout, ceiling)
	b.meter = startMeter(b.base, &b.calls, b.deadlines.adapt)
	b.deadlines.m = b.meter
	b.closedAt.Store(b.meter.at(0))
	b.deadlines.warmUntil.Store(b.meter.at(0) + int64(cfg.window/10))
	b.notes.fn = cfg.onChange
	b.tally = newOutcomeTally(cfg.window)
	b.run.tenth = max(int64(cfg.window/10), 1)
	b.gen.Store(&generation{})
	minFailures, ratio, settle := uint32(cfg.minFailures), cfg.ratio, int64(cfg.window/10)
	// gobreaker keeps the circuit's state; the window's counts are the
	// breaker's own, on the process clock (tally.go), so gobreaker keeps
	// no window of its own (no Interval).
	b.cb = gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        cfg.name,
		MaxRequests: uint32(cfg.probes),
		Timeout:     cfg.openTimeout,
		// gobreaker calls ReadyToTrip, under its lock, on each failure
		// while the circuit is closed: the trip conditions of WithTrip.
		ReadyToTrip: func(gobreaker.Counts) bool {
			now := b.procNow()
			if now-b.closedAt.Load() < settle {
				return false
			}
			if b.run.inWindow(now) >= minFailures && now-b.run.start >= runSpan*b.runDeadline() {
				return true
			}
			c := b.counts(now)
			return c.Failures >= minFailures && float64(c.Failures) >= ratio*float64(c.Failures+c.Successes)
		},
		OnStateChange: b.onStateChange,
		// IsExcluded, then IsSuccessful, are called under gobreaker's
		// lock for each outcome it counts, in the circuit's current
		// generation.
		IsExcluded: func(err error) bool {
			if err != errExcluded {
				return false
			}
			b.tally.add(b.gen.Load(), b.procNow(), kindExcluded)
			return true
		},
		IsSuccessful: func(err error) bool {
			f, _ := err.(*countedFailure)
			if f != nil {
				b.cause = f.err
				// At the instant it failed, or a concurrent one did.
				at := min(b.procNow(), b.failedAt.Load())
				b.run.fail(at, f.lapsed)
				b.tally.add(b.gen.Load(), at, kindFailure)
			} else if err == nil {
				b.run.end()
				b.tally.add(b.gen.Load(), b.procNow(), kindSuccess)
			}
			o := b.outcomes.Load()
			if err != nil {
				b.outcomes.Store((o>>1+1)<<1 | 1)
			} else if o&1 != 0 {
				b.outcomes.Store(o &^ 1)
			}
			return err == nil
		},
	})
	return b, nil
}

// onStateChange records a change. gobreaker calls it with its lock held,
// so it only stores: the user's function is called later, by settle.
func (b *Breaker) onStateChange(_ string, from, to gobreaker.State) {
	at := time.Now()
	s := stateOf(to)
	proc := b.meter.at(int64(at.Sub(b.base)))
	b.gen.Store(&generation{id: b.gen.Load().id + 1, start: proc})
	if s == Open {
		// Before the state, so that whoever sees Open sees its deadline.
		b.openUntil.Store(int64(at.Sub(b.base) + b.cfg.openTimeout))
	}
	b.state.Store(uint32(s))
	b.run.end() // gobreaker's counts start again too
	if s == Closed {
		b.closedAt.Store(proc)
		b.deadlines.warmUntil.Store(proc + int64(b.cfg.window/10))
		b.steadyAfter.Store(int64(at.Sub(b.base) + b.cfg.window))
		b.ramp.Store(int64(b.cfg.probes))
	}
	b.changes.Add(1)
	// The change's instant is read once gobreaker and the fast path both
	// have the new state: a call made after it is decided by that state,
	// however long this goroutine waited for a processor in between.
	c := Change{Name: b.cfg.name, From: stateOf(from), To: s, At: time.Now()}
	if s == Open {
		c.Cause = b.cause
	}
	b.notes.push(c)
}

// Apply decides req through the store, unless the circuit is open, and
// answers by the breaker's mode when the store cannot decide (see
// [Breaker]). Requests under [core.Inf] are allowed at once.
func (b *Breaker) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	return b.applyOne(ctx, &req, b.cfg.mode)
}

// applyOne is Apply, answering by mode. On the fast path (see fast.go)
// it calls the store itself, inline, under the tick's deadline;
// otherwise the request goes the way of a batch of one (applyAlone).
//
// A caller that waited for Redis finds its stack gone cold, and every
// cache line of it a decision writes costs a few nanoseconds; a Request
// or a Decision passed or returned by value is copied through several.
// So the request comes by pointer, is copied once, into the store's
// call, and the fast path runs in this one frame.
func (b *Breaker) applyOne(ctx context.Context, req *core.Request, mode Mode) (core.Decision, error) {
	c, ok := b.fast()
	if !ok || req.Terms == nil || req.Limit.IsInf() || b.closed.Load() {
		return b.applyAlone(ctx, req, mode)
	}
	if err := ctx.Err(); err != nil {
		b.gone.Add(1)
		return core.Decision{}, err
	}
	t, frozen := b.begin(c.start)
	d, err := b.remote.Apply(b.inlineContext(ctx, t), *req)
	if err != nil {
		return b.failedOne(ctx, req, mode, c, t, err)
	}
	b.observe(c.start, frozen)
	b.fastDone(c, answered, nil)
	b.notes.flush()
	return d, nil
}

// applyAlone is applyOne off the fast path: the request is a batch of
// one, passed to the store by value, never in a slice (a slice handed to
// an interface's method escapes to the heap).
//
//go:noinline
func (b *Breaker) applyAlone(ctx context.Context, req *core.Request, mode Mode) (core.Decision, error) {
	var one [1]core.Decision
	err := b.apply(ctx, []core.Request{*req}, one[:], mode, func(ctx context.Context) error {
		var err error
		one[0], err = b.remote.Apply(ctx, *req)
		return err
	})
	return one[0], err
}

// ApplyAll decides reqs together (see [core.Store]) in one call of the
// store's ApplyAll, which is one call of the circuit: it counts once,
// success or failure, and takes one probe or one place in the slow start.
// When the store cannot decide, the mode answers the whole batch (see
// [Mode]): every request allowed, every request denied, or the batch
// decided atomically on the local store, each request under the
// instance's share of its own limit. Requests under [core.Inf] are
// always answered with [core.Unlimited]; a batch of nothing else is
// answered at once. A batch of one request goes to the store's Apply.
func (b *Breaker) ApplyAll(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	return b.applyAll(ctx, reqs, out, b.cfg.mode)
}

// applyAll is ApplyAll, answering by mode.
func (b *Breaker) applyAll(ctx context.Context, reqs []core.Request, out []core.Decision, mode Mode) error {
	if len(reqs) == 1 && len(out) == 1 {
		d, err := b.applyOne(ctx, &reqs[0], mode)
		if err == nil {
			out[0] = d
		}
		return err
	}
	return b.apply(ctx, reqs, out, mode, func(ctx context.Context) error {
		return b.remote.ApplyAll(ctx, reqs, out)
	})
}

// apply decides reqs, one request or a batch, writing their decisions to
// out; ask asks the store for them under ctx.
func (b *Breaker) apply(ctx context.Context, reqs []core.Request, out []core.Decision, mode Mode, ask func(context.Context) error) error {
	if b.closed.Load() {
		return core.ErrClosed
	}
	if len(reqs) == 0 || len(out) != len(reqs) {
		return stores.ValidateAll(reqs, out) // which says what is wrong
	}
	// The store validates what it decides; the breaker validates only
	// what it answers itself (an Inf batch, the mode's answers).
	if unlimited(reqs) {
		if err := validate(reqs, out); err != nil {
			return err
		}
		for i := range out {
			out[i] = reqs[i].Answer(core.Unlimited())
		}
		return nil
	}
	if c, ok := b.fast(); ok {
		err := b.callFast(ctx, reqs, out, mode, ask, c)
		b.notes.flush()
		return err
	}
	if b.open() || !b.admit() {
		err := b.answer(reqs, out, mode)
		if !isRequestError(err) { // an invalid request is not a rejected call
			b.rejected.Add(1)
		}
		return err
	}
	answered, err := b.call(ctx, reqs, out, mode, ask)
	b.release(answered)
	// The changes this call made reach the user's function only now, once
	// the call is out of flight: a function that blocks holds its caller,
	// not a place in the slow start that a recovery opens with, which
	// would have every other call answered by the mode meanwhile.
	b.notes.flush()
	return err
}

// unlimited reports whether every request of reqs is under [core.Inf]:
// nothing to ask the store.
func unlimited(reqs []core.Request) bool {
	for i := range reqs {
		if reqs[i].Terms == nil || !reqs[i].Limit.IsInf() {
			return false
		}
	}
	return true
}

// validate checks reqs, one request or a batch, before the breaker
// answers them itself.
func validate(reqs []core.Request, out []core.Decision) error {
	if len(reqs) == 1 {
		return reqs[0].Validate()
	}
	return stores.ValidateAll(reqs, out)
}

// outcome is what became of a call to the store, as the circuit counts it.
type outcome uint8

const (
	notAsked outcome = iota // the circuit refused the call
	answered                // the store decided
	excluded                // not the store's failure: the error is the caller's
	gone                    // the caller's context ended: the error is the caller's
	excused                 // timed out while the process stalled: the mode answers, uncounted
	failed                  // the store's failure, an error it answered: the mode answers
	lapsed                  // the store's failure, its deadline passed: the mode answers
)

// report is the outcome, with the store's error err, as gobreaker counts
// it: a success (nil), a failure, or excluded from the counts.
func (o outcome) report(err error) error {
	switch o {
	case answered:
		return nil
	case failed, lapsed:
		return &countedFailure{err: err, lapsed: o == lapsed}
	}
	return errExcluded
}

// call asks the store through gobreaker, answering by mode when it may
// not or cannot. It reports whether the store answered.
func (b *Breaker) call(ctx context.Context, reqs []core.Request, out []core.Decision, mode Mode, inline func(context.Context) error) (bool, error) {
	if err := ctx.Err(); err != nil {
		b.gone.Add(1)
		return false, err // the caller has gone: nothing to ask
	}
	var err error
	var o outcome
	b.cb.Execute(func() (struct{}, error) {
		o, err = b.ask(ctx, reqs, out, inline, b.now())
		return struct{}{}, o.report(err)
	})
	return b.settle(o, err, reqs, out, mode)
}

// fastCall is what a call on the fast path began with: the circuit's
// generation, gobreaker's outcomes, and the instant.
type fastCall struct {
	gen      *generation
	outcomes uint64
	start    int64
}

// fast reports whether a call made now may take the fast path (see
// fast.go): the circuit is closed, its slow start is over, calls run
// inline, and the last outcome gobreaker counted was a success.
func (b *Breaker) fast() (fastCall, bool) {
	c := fastCall{gen: b.gen.Load(), outcomes: b.outcomes.Load()}
	if State(b.state.Load()) != Closed || b.ramp.Load() != 0 || c.outcomes&1 != 0 {
		return c, false
	}
	c.start = b.now()
	return c, b.steady(c.start)
}

// callFast is call on the fast path (see fastDone).
func (b *Breaker) callFast(ctx context.Context, reqs []core.Request, out []core.Decision, mode Mode, inline func(context.Context) error, c fastCall) error {
	if err := ctx.Err(); err != nil {
		b.gone.Add(1)
		return err
	}
	o, err := b.ask(ctx, reqs, out, inline, c.start)
	b.fastDone(c, o, err)
	_, err = b.settle(o, err, reqs, out, mode)
	return err
}

// failedOne judges the error of a call that applyOne made on the fast
// path, counts it, and answers by mode if the store did not decide.
//
//go:noinline
func (b *Breaker) failedOne(ctx context.Context, req *core.Request, mode Mode, c fastCall, t *tick, err error) (core.Decision, error) {
	o, err := b.judge(ctx, t, err)
	b.fastDone(c, o, err)
	var one [1]core.Decision
	_, err = b.settle(o, err, []core.Request{*req}, one[:], mode)
	b.notes.flush()
	return one[0], err
}

// fastDone counts the outcome o of a call on the fast path begun as c: a
// success in the tally if gobreaker counted no failure meanwhile;
// anything else, and a success during which gobreaker counted a failure,
// is reported to gobreaker, which then counts it after the failure, as
// it would have.
func (b *Breaker) fastDone(c fastCall, o outcome, err error) {
	switch {
	case o == answered && b.outcomes.Load() == c.outcomes:
		b.tally.add(c.gen, b.meter.at(c.start), kindSuccess)
	case b.gen.Load() == c.gen: // else gobreaker would not count it either
		b.cb.Execute(func() (struct{}, error) { return struct{}{}, o.report(err) })
	}
}

// settle counts the outcome of a call and, when the store did not
// decide, answers by mode. It reports whether the store answered.
func (b *Breaker) settle(o outcome, err error, reqs []core.Request, out []core.Decision, mode Mode) (bool, error) {
	switch o {
	case notAsked:
		b.rejected.Add(1)
		return false, b.answer(reqs, out, mode)
	case failed, lapsed:
		b.failures.Add(1)
		return false, b.answer(reqs, out, mode)
	case excused:
		b.excused.Add(1)
		return false, b.answer(reqs, out, mode)
	case gone:
		b.gone.Add(1)
		return false, err
	}
	return true, err
}

// ask calls the store, beginning at start (b.now(): the monotonic clock
// alone, half the cost of time.Now), under the per-call deadline (or the
// caller's, if sooner), inline while the store is steady and detached
// otherwise (see steady), and judges its answer.
func (b *Breaker) ask(ctx context.Context, reqs []core.Request, out []core.Decision, inline func(context.Context) error, start int64) (outcome, error) {
	t, frozen := b.begin(start)
	var err error
	if b.steady(start) {
		err = inline(b.inlineContext(ctx, t))
	} else {
		err = b.callDetached(ctx, reqs, out, t)
	}
	if err != nil {
		return b.judge(ctx, t, err)
	}
	b.observe(start, frozen)
	return answered, nil
}

// begin counts a call to the store that begins at start, and returns its
// tick and the time the process had been frozen by then (see observe).
func (b *Breaker) begin(start int64) (*tick, int64) {
	b.calls.Add(1)
	b.meter.awake(start)
	return b.deadlines.at(start), b.meter.frozen()
}

// observe counts the latency of a call that began at start and was
// answered, when the process had been frozen for frozen, if the call
// is timed (see minTimed): on the wall clock, the process's stalls
// included (see deadlines).
func (b *Breaker) observe(start, frozen int64) {
	if b.deadlines.timed() {
		b.deadlines.observe(b.now() - start - (b.meter.frozen() - frozen))
	}
}

// judge returns the outcome of a call of tick t that failed with err,
// and the error its caller gets.
func (b *Breaker) judge(ctx context.Context, t *tick, err error) (outcome, error) {
	// A client may report a timeout as soon as the deadline passes, before
	// the context's cancellation has reached it: go by the deadline too.
	late := t.expired()
	switch cerr := callerEnded(ctx, t); {
	case cerr != nil:
		// The caller gave up, or its own deadline passed: not the store's
		// fault, whatever the error says.
		if !errors.Is(err, cerr) {
			err = fmt.Errorf("policy: %w: %w", cerr, err)
		}
		return gone, err
	case isRequestError(err):
		return excluded, err
	case t.ctx.pd.ended() == bounded:
		// The process stalled for longer than stallBound: the store did
		// not have its time.
		return excused, err
	case late || IsStoreFailure(err):
		o := failed
		if timedOut(err, late) {
			o = lapsed
		}
		if o == failed || b.timingOut() {
			b.unsteady()
		}
		// When the failure happened: its deadline's end, if it timed out.
		// A stall between then and its report does not shorten the run
		// it begins (see ReadyToTrip).
		pd := t.ctx.pd
		b.failedAt.Store(min(b.procNow(), pd.start+pd.span))
		return o, err
	}
	return excluded, err
}

// runDeadline is the deadline a run of failures is measured in (see
// [WithTrip]), under gobreaker's lock: the per-call deadline as adapted
// if a call of the run timed out, and its floor if every one failed with
// an error the store gave. The adapted deadline waits out the latency a
// busy host adds to every reply; an error (a refused connection, an OOM
// or READONLY reply) is the store's own answer, which no stall of this
// process can bring about, so a run of them is weighed at the floor, and
// a killed Redis is cut off within 100 ms however high the latency had
// raised the deadline.
func (b *Breaker) runDeadline() int64 {
	if b.run.lapsed {
		return b.deadlines.timeout.Load()
	}
	return b.deadlines.floor
}

// timedOut reports whether a failed call timed out: its deadline passed,
// or the client said so.
func timedOut(err error, late bool) bool {
	if late || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	ne, ok := errors.AsType[net.Error](err)
	return ok && ne.Timeout()
}

// timingOut reports whether calls are timing out in earnest: within the
// circuit's window, at least as many failures as may trip it, and at
// least unsteadyRatio of the calls. A loaded service sees a call's
// latency pass the deadline now and then, which the mode answers; it
// does not make the client hold its callers, and running every call
// detached for it would cost what makes more calls late.
func (b *Breaker) timingOut() bool {
	c := b.counts(b.procNow())
	return int(c.Failures) >= b.cfg.minFailures &&
		float64(c.Failures) >= unsteadyRatio*float64(c.Failures+c.Successes)
}

// counts returns the outcomes counted in the window that ends at the
// process instant now.
func (b *Breaker) counts(now int64) Counts {
	n := b.tally.sum(b.gen.Load(), now)
	return Counts{Successes: n[kindSuccess], Failures: n[kindFailure], Excluded: n[kindExcluded]}
}

// unsteadyRatio is the share of a window's calls timing out from which
// calls run detached (see timingOut). rueidis holds callers once its
// queue of 1024 commands a connection is full of abandoned calls: a
// Redis that stops answering times out every call, far above it.
const unsteadyRatio = 0.05

// steady reports whether a call made at now (ns after b.base) may run
// inline, on its caller's goroutine: the circuit is closed, and within
// the last window the circuit has not closed, no call has failed but by
// timing out, and calls have not been timing out in earnest (timingOut).
//
// An inline call costs no goroutine, timer or copy, and returns when the
// store does, which a healthy client does by the context's deadline. A
// client in trouble may not: rueidis holds its callers while it
// reconnects, and once its ring of commands is full of calls abandoned at
// their deadline, until it drops the connection. Either starts with
// failures: a dropped or refused connection, or calls timing out, all of
// them once Redis stops answering. So from such a failure until a window
// has passed without another, and while the circuit is open, half-open
// or newly closed, calls run detached (callDetached), which bounds them
// whatever the client does. A success, even a late one (a process
// stalled by its scheduler), is no sign of such trouble, and nor is the
// odd call of a loaded service timing out.
func (b *Breaker) steady(now int64) bool {
	return State(b.state.Load()) == Closed && now >= b.steadyAfter.Load()
}

// unsteady has calls run detached for a window from now (see steady).
func (b *Breaker) unsteady() {
	b.steadyAfter.Store(b.now() + int64(b.cfg.window))
}

// inlineContext returns the context of a call that runs inline: one
// that ends at the tick's deadline, or the caller's if that is sooner.
func (b *Breaker) inlineContext(ctx context.Context, t *tick) context.Context {
	if d, ok := ctx.Deadline(); ok && !d.After(t.earliest) {
		return ctx
	}
	return newCallContext(ctx, t)
}

// callGrace is how many per-call deadlines a detached call may run after
// its caller has had the mode's answer. A call that opens a connection (a
// dial, a handshake) or loads a script (NOSCRIPT, then EVAL) after a
// restart may need a few round trips more than the deadline allows; cut
// off at the deadline, it would start over on the next call, and a
// recovered Redis might never answer a probe in time.
const callGrace = 4

// detached is a detached call's result: a single request's decision, or
// a batch's.
type detached struct {
	d   core.Decision
	out []core.Decision
	err error
}

// callDetached calls the store on a goroutine of its own, under a context
// that ends with ctx or after callGrace deadlines of the process's time,
// and waits for its answer until the tick's deadline, or until ctx ends;
// it copies the decisions to out only if it has them in time. The caller
// thus returns by the deadline even when the client does not, and a call
// the client holds longer goes on without its caller, until the client
// returns it: by the grace, by the client's own timeouts, or at its
// Close. The call may outlive its caller, so it works on its own copies
// of the requests, and writes its own decisions.
func (b *Breaker) callDetached(ctx context.Context, reqs []core.Request, out []core.Decision, t *tick) error {
	ch := make(chan detached, 1)
	var one core.Request
	var rs []core.Request
	if len(reqs) == 1 {
		one = reqs[0]
	} else {
		rs = append(rs, reqs...)
	}
	cctx := b.meter.context(ctx, callGrace*t.timeout, b.now())
	go func() {
		defer cctx.stop()
		var r detached
		if rs == nil {
			r.d, r.err = b.remote.Apply(cctx, one)
		} else {
			r.out = make([]core.Decision, len(rs))
			r.err = b.remote.ApplyAll(cctx, rs, r.out)
		}
		ch <- r
	}()
	take := func(r detached) error {
		switch {
		case r.err != nil:
		case r.out == nil:
			out[0] = r.d
		default:
			copy(out, r.out)
		}
		return r.err
	}
	select {
	case r := <-ch:
		return take(r)
	case <-t.ctx.Done():
		select {
		case r := <-ch: // it answered as the deadline passed
			return take(r)
		default:
		}
		return fmt.Errorf("policy: the store did not answer within %v: %w", t.timeout, context.DeadlineExceeded)
	case <-ctx.Done():
		return fmt.Errorf("policy: the store did not answer: %w", ctx.Err())
	}
}

// maxRamp ends the slow start: by then the client has opened as many
// connections as the load needs.
const maxRamp = 1024

// admit counts a call in flight to the store, unless the circuit is in
// its slow start after a recovery and the calls in flight are at its cap.
// The slow start lasts until the cap reaches maxRamp, or for a window.
func (b *Breaker) admit() bool {
	n := b.inflight.Add(1)
	if c := b.ramp.Load(); c > 0 && n > c {
		if b.procNow()-b.closedAt.Load() < int64(b.cfg.window) {
			b.inflight.Add(-1)
			return false
		}
		b.ramp.CompareAndSwap(c, 0)
	}
	return true
}

// release ends a call admitted by admit. A store's answer raises the slow
// start's cap by one, which doubles it every round trip.
func (b *Breaker) release(answered bool) {
	b.inflight.Add(-1)
	if !answered {
		return
	}
	if c := b.ramp.Load(); c > 0 {
		next := c + 1
		if next >= maxRamp {
			next = 0
		}
		b.ramp.CompareAndSwap(c, next) // a lost race loses one step
	}
}

// callerEnded returns the caller's context's error if it ended the call:
// it was cancelled, or its own deadline passed before the process had
// run for the call's.
func callerEnded(ctx context.Context, t *tick) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !t.expired() && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// now returns the wall clock's monotonic instant, in ns after b.base.
func (b *Breaker) now() int64 { return int64(time.Since(b.base)) }

// procNow returns the process clock (see meter).
func (b *Breaker) procNow() int64 { return b.meter.at(b.now()) }

// open reports whether the circuit is open and its open timeout has not
// passed, so that a call need not ask gobreaker (and take its lock).
func (b *Breaker) open() bool {
	return State(b.state.Load()) == Open && b.now() < b.openUntil.Load()
}

// answer writes the mode's decisions for reqs to out: the whole batch is
// answered alike. Requests under [core.Inf] are allowed as ever. The
// requests are validated once: by the local store that decides them
// under [Degrade], here for the other modes.
func (b *Breaker) answer(reqs []core.Request, out []core.Decision, mode Mode) error {
	if mode == Degrade {
		if ok, err := b.degrade(reqs, out); ok || err != nil {
			return err
		}
	}
	if err := validate(reqs, out); err != nil {
		return err
	}
	for i := range reqs {
		switch {
		case reqs[i].Limit.IsInf():
			out[i] = reqs[i].Answer(core.Unlimited())
		case mode == FailOpen:
			out[i] = reqs[i].Answer(core.Decision{Allowed: true, Source: core.SourceFailOpen})
		default:
			out[i] = reqs[i].Answer(b.failClosed())
		}
	}
	return nil
}

func (b *Breaker) failClosed() core.Decision {
	return core.Decision{RetryAfter: b.retryAfter(), Source: core.SourceFailClosed}
}

// retryAfter is a fail-closed denial's RetryAfter: the time until an open
// circuit lets a probe through, else the per-call deadline.
func (b *Breaker) retryAfter() time.Duration {
	if State(b.state.Load()) == Open {
		if d := time.Duration(b.openUntil.Load() - b.now()); d > 0 {
			return d
		}
	}
	return time.Duration(b.deadlines.timeout.Load())
}

// degrade decides reqs together on the local store, each under the
// instance's share of its limit, and reports whether it did. The local
// store validates the requests; when it refuses one, degrade returns the
// request's own error, or reports that it did not decide if the request
// is valid and its share is not (a share that cannot be expressed), and
// the batch is then answered as fail-closed.
func (b *Breaker) degrade(reqs []core.Request, out []core.Decision) (bool, error) {
	local := b.cfg.local
	var err error
	if len(reqs) == 1 {
		// Apart from the batch: a slice handed to an interface's method
		// escapes, and a single decision allocates nothing.
		r, ok := b.share(reqs[0])
		if !ok {
			return false, nil
		}
		out[0], err = local.Apply(context.Background(), r)
	} else {
		rs := make([]core.Request, len(reqs))
		for i := range reqs {
			var ok bool
			if rs[i], ok = b.share(reqs[i]); !ok {
				return false, nil
			}
		}
		res := make([]core.Decision, len(rs)) // out would escape likewise
		if err = local.ApplyAll(context.Background(), rs, res); err == nil {
			copy(out, res)
		}
	}
	switch t := core.Classify(err).Type; {
	case err == nil:
	case t == core.FailureInvalidRequest || t == core.FailureUnsupported:
		// The request's fault, or only its share's: only the request's
		// is an error.
		return false, validate(reqs, out)
	default:
		return false, fmt.Errorf("policy: degrade: %w", err)
	}
	for i := range out {
		if !reqs[i].Limit.IsInf() {
			out[i].Source = core.SourceDegraded
		}
	}
	return true, nil
}

// share returns r under the instance's share of its limit (see
// [Degrade]), unless the share cannot be expressed; r unchanged under
// [core.Inf].
func (b *Breaker) share(r core.Request) (core.Request, bool) {
	if r.Limit.IsInf() {
		return r, true
	}
	lim, ok := share(r.Limit, int64(b.cfg.instances))
	r = r.Clone() // terms are shared: the share goes on a copy
	r.Limit = lim
	return r, ok
}

// Reset forgets key's state under alg in the remote store and in the
// local store of [WithLocal]. It fails with the remote store's error if
// that fails (after the local state is forgotten). Reset is not guarded
// by the circuit: it runs under the caller's context alone.
func (b *Breaker) Reset(ctx context.Context, key string, alg core.Algorithm) error {
	if b.closed.Load() {
		return core.ErrClosed
	}
	if s := b.cfg.local; s != nil {
		if err := s.Reset(ctx, key, alg); err != nil {
			return err
		}
	}
	return b.remote.Reset(ctx, key, alg)
}

// Close closes the local store of [WithLocal], then the remote store,
// and returns the first error. It does not wait for calls in flight (their callers
// return by the per-call deadline), so it returns promptly even while
// Redis is down.
// Later calls fail with [core.ErrClosed]. Close is idempotent: later calls
// return the first's result. Views share the breaker's fate.
func (b *Breaker) Close() error {
	b.closeOnce.Do(func() {
		b.closed.Store(true)
		b.deadlines.stop()
		b.meter.close()
		if s := b.cfg.local; s != nil {
			b.closeErr = s.Close()
		}
		b.closeErr = cmp.Or(b.closeErr, b.remote.Close())
	})
	return b.closeErr
}

// Unwrap returns the remote store.
func (b *Breaker) Unwrap() core.Store { return b.remote }

// Name returns the breaker's name (see [WithName]).
func (b *Breaker) Name() string { return b.cfg.name }

// Mode returns the mode of the breaker's own answers (see [WithMode]).
func (b *Breaker) Mode() Mode { return b.cfg.mode }

// State returns the circuit's state as of its last change. The change from
// open to half-open happens at the first call after the open timeout, so
// an open circuit reads as open until then. State costs an atomic load.
func (b *Breaker) State() State { return State(b.state.Load()) }

// BreakerState returns [Breaker.State] as a string: "closed", "half-open"
// or "open". Package telemetry reports it.
func (b *Breaker) BreakerState() string { return b.State().String() }

// BreakerChanges returns how many times the circuit's state has changed
// since [NewBreaker]; it never decreases. Package telemetry reports it.
func (b *Breaker) BreakerChanges() uint64 { return b.changes.Load() }

// Counts returns the circuit's current counts (see [Counts]).
func (b *Breaker) Counts() Counts { return b.counts(b.procNow()) }

// Stats returns the breaker's totals since it was made.
func (b *Breaker) Stats() Stats {
	return Stats{
		Calls:    b.calls.Load(),
		Failures: b.failures.Load(),
		Rejected: b.rejected.Load(),
		Gone:     b.gone.Load(),
		Excused:  b.excused.Load(),
		Changes:  b.changes.Load(),
	}
}

// WithMode returns a view of the breaker that answers with mode m: it
// shares the breaker's circuit, store and counts, so one breaker per Redis
// can serve limiters that each need their own mode. It fails with
// [ErrInvalidOption] for an unknown mode, and for [Degrade] on a breaker
// made without [WithLocal].
func (b *Breaker) WithMode(m Mode) (*View, error) {
	switch {
	case !m.valid():
		return nil, fmt.Errorf("%w: WithMode(%v): unknown mode", ErrInvalidOption, m)
	case m == Degrade && b.cfg.local == nil:
		return nil, fmt.Errorf("%w: WithMode(degrade) needs the breaker made with WithLocal: the store to decide on while the circuit is open", ErrInvalidOption)
	}
	return &View{b: b, mode: m}, nil
}

// View is a [Breaker] answering with a mode of its own; make one with
// [Breaker.WithMode]. A View is safe for concurrent use. It owns nothing:
// its Close does nothing, and the View's calls fail with [core.ErrClosed]
// once the Breaker is closed.
type View struct {
	b    *Breaker
	mode Mode
}

// Apply is [Breaker.Apply], answering by the view's mode.
func (v *View) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	return v.b.applyOne(ctx, &req, v.mode)
}

// ApplyAll is [Breaker.ApplyAll], answering by the view's mode.
func (v *View) ApplyAll(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	return v.b.applyAll(ctx, reqs, out, v.mode)
}

// Close does nothing: the view shares the breaker, which its owner
// closes.
func (v *View) Close() error { return nil }

// Reset is [Breaker.Reset].
func (v *View) Reset(ctx context.Context, key string, alg core.Algorithm) error {
	return v.b.Reset(ctx, key, alg)
}

// Unwrap returns the breaker, whose Unwrap returns the remote store.
func (v *View) Unwrap() core.Store { return v.b }

// Breaker returns the breaker the view shares.
func (v *View) Breaker() *Breaker { return v.b }

// Mode returns the view's mode.
func (v *View) Mode() Mode { return v.mode }

// State is [Breaker.State].
func (v *View) State() State { return v.b.State() }

// BreakerState is [Breaker.BreakerState].
func (v *View) BreakerState() string { return v.b.BreakerState() }

// BreakerChanges is [Breaker.BreakerChanges].
func (v *View) BreakerChanges() uint64 { return v.b.BreakerChanges() }
