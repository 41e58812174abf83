package adaptive

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/core"
)

// ErrInvalidConfig reports a law, option or initial limit [New] cannot
// use; the error says which and why.
var ErrInvalidConfig = errors.New("adaptive: invalid configuration")

// ErrInvalidSample reports a sample [Controller.Report] rejected: a
// negative latency or an unknown outcome. A rejected sample is counted in
// [Stats].Invalid and used for nothing else.
var ErrInvalidSample = errors.New("adaptive: invalid sample")

// Built once, so that rejecting a sample allocates nothing.
var (
	errNegative = fmt.Errorf("%w: negative latency", ErrInvalidSample)
	errOutcome  = fmt.Errorf("%w: unknown outcome", ErrInvalidSample)
)

// Defaults for a [Controller]'s options.
const (
	// DefaultInterval is how often the limit is recomputed.
	DefaultInterval = time.Second
	// DefaultMaxStep caps each interval's change at half the limit.
	DefaultMaxStep = 0.5
	// DefaultMaxFactor sets the default upper bound: 100 times the
	// initial rate.
	DefaultMaxFactor = 100
	// DefaultTTLIntervals is how many intervals a shared value outlives
	// its last write unless [WithSharedTTL] says otherwise.
	DefaultTTLIntervals = 10
)

// Controller adapts a limit to the health of a downstream. Callers report
// each downstream call ([Controller.Report]); once an interval
// ([Controller.Update], which [Controller.Run] calls on a ticker) the
// controller's [Law] turns the interval's latencies, failures and overload
// signals into the next limit, capped in its step and bounded. Decisions
// read the limit through [Controller.Override], which [policy.WithOverride]
// takes, or [Controller.Limit].
//
// With [WithShared], the limit is kept in a store under a key, so that
// every controller on that store and key (a fleet behind one Redis)
// converges on one value; without it the limit is the process's own.
//
// Make one with [New]; the zero Controller is not usable. A Controller is
// safe for concurrent use. It starts no goroutine: Run is the caller's to
// start, and [Controller.Close] stops it.
//
// [policy.WithOverride]: https://pkg.go.dev/github.com/sluicehq/sluice/policy#WithOverride
type Controller struct {
	counts counters // written by Report, lock-free
	// limit is the current *core.Limit, read by every decision. An
	// unsafe.Pointer rather than an atomic.Pointer[core.Limit], whose
	// generic Load is called through a dictionary and not inlined: that
	// cost each decision through Override about 15 ns.
	limit unsafe.Pointer
	match func(core.Request) bool // nil: Override applies to every request

	law        Law
	period     time.Duration
	burstRatio float64
	min, max   float64
	increase   float64
	maxStep    float64
	interval   time.Duration
	store      core.Store
	key        string
	ttl        time.Duration // WithSharedTTL's, or 0
	shared     core.Terms    // the SharedLimit request's terms
	onChange   func(Change)

	mu    sync.Mutex // serializes Update
	rate  float64
	state lawState
	prev  signals // the counters at the last Update
	cur   signals
	delta signals

	intervals, samples, written, adopted, local atomic.Uint64

	runMu  sync.Mutex
	closed bool
	stop   chan struct{}
	runs   sync.WaitGroup
}

// Change is a change of a controller's limit, as [WithOnChange] receives
// it.
type Change struct {
	// Old and New are the limits before and after.
	Old, New core.Limit
	// Reason says what moved the limit.
	Reason Reason
	// Local is set when the controller has a shared store ([WithShared])
	// that failed, or answered through a fallback: New is this
	// controller's own proposal, not the fleet's.
	Local bool
}

// Reason says why a limit changed.
type Reason uint8

const (
	// ReasonHold is an interval with nothing to act on; the limit holds.
	ReasonHold Reason = iota
	// ReasonHealthy is an interval in which the downstream was healthy:
	// the law raised the limit.
	ReasonHealthy
	// ReasonLatency is an interval whose latency made the law lower the
	// limit.
	ReasonLatency
	// ReasonErrors is an interval in which failures passed the
	// [ErrorRatio].
	ReasonErrors
	// ReasonOverload is an interval in which the downstream reported
	// overload.
	ReasonOverload
	// ReasonFleet is a limit adopted from the shared store, written by
	// another controller of the fleet.
	ReasonFleet
)

var reasonNames = [...]string{"hold", "healthy", "latency", "errors", "overload", "fleet"}

// String returns the reason's name: "hold", "healthy", "latency",
// "errors", "overload" or "fleet".
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// Stats are a controller's counts since it was made.
type Stats struct {
	// Intervals is the number of updates run.
	Intervals uint64
	// Written is the number of this controller's proposals the shared
	// store took; Adopted the number of intervals in which it took the
	// fleet's value instead; Local the number in which the shared store
	// failed and it went on alone.
	Written, Adopted, Local uint64
	// Samples is the number of calls reported and used by the updates
	// so far; Invalid the number of samples Report rejected.
	Samples, Invalid uint64
}

// Option configures a [Controller]. The options are the With… functions
// of this package.
type Option interface {
	apply(*Controller) error
}

type optionFunc func(*Controller) error

func (f optionFunc) apply(c *Controller) error { return f(c) }

// WithBounds keeps the limit's rate between min and max events per the
// initial limit's period (1 ≤ min ≤ initial rate ≤ max). The defaults are
// 1 and [DefaultMaxFactor] times the initial rate. max must leave the
// limit valid: a burst of max × (initial burst / initial rate), times the
// period in µs, within 2^52.
func WithBounds(min, max int64) Option {
	return optionFunc(func(c *Controller) error {
		if min < 1 || max < min {
			return fmt.Errorf("%w: WithBounds(%d, %d): want 1 ≤ min ≤ max", ErrInvalidConfig, min, max)
		}
		c.min, c.max = float64(min), float64(max)
		return nil
	})
}

// WithInterval sets how often [Controller.Run] recomputes the limit: a
// whole number of microseconds from 1 ms to 1 hour. The default is
// [DefaultInterval]. An interval should hold enough calls for its
// latencies to mean something: tens at least.
func WithInterval(d time.Duration) Option {
	return optionFunc(func(c *Controller) error {
		if d < time.Millisecond || d > time.Hour || d%time.Microsecond != 0 {
			return fmt.Errorf("%w: WithInterval(%v): want a whole number of µs from 1ms to 1h", ErrInvalidConfig, d)
		}
		c.interval = d
		return nil
	})
}

// WithMaxStep caps each interval's change of the limit at fraction f
// (0 < f ≤ 1) of the limit, up or down, whatever the law proposes. The
// default is [DefaultMaxStep].
func WithMaxStep(f float64) Option {
	return optionFunc(func(c *Controller) error {
		if !(f > 0 && f <= 1) {
			return fmt.Errorf("%w: WithMaxStep(%v): want a fraction in (0, 1]", ErrInvalidConfig, f)
		}
		c.maxStep = f
		return nil
	})
}

// WithShared keeps the limit in store under key ([SharedLimit]), so that
// every controller with the same store and key converges on one limit.
// Each interval a controller computes its law's proposal from its own
// samples and the current shared limit, and the first to propose in the
// interval writes it; the others adopt it. A controller with no samples
// in an interval only reads. Proposal and read are one atomic step of the
// store; on Redis, one script call.
//
// If the store fails (or answers through a fallback, such as a
// [policy.Breaker] that is open), the controller keeps its last value and
// goes on with its own proposals until the store answers again; Update
// then returns the store's error. Give a remote store behind a breaker,
// so that an outage costs each interval one fast failure. The controller
// does not close the store.
//
// [policy.Breaker]: https://pkg.go.dev/github.com/sluicehq/sluice/policy#Breaker
func WithShared(store core.Store, key string) Option {
	return optionFunc(func(c *Controller) error {
		if store == nil {
			return fmt.Errorf("%w: WithShared: nil store", ErrInvalidConfig)
		}
		if err := core.ValidateKey(key); err != nil {
			return fmt.Errorf("%w: WithShared: %w", ErrInvalidConfig, err)
		}
		c.store, c.key = store, key
		return nil
	})
}

// WithSharedTTL sets how long a shared value lives after its last write,
// rounded up to a whole number of intervals, at least 2. The default is
// [DefaultTTLIntervals] intervals. While any controller of the fleet has
// calls to report, the value is written every interval and never
// expires; after a fleet-wide pause a stale value is forgotten this long
// after its last write.
func WithSharedTTL(d time.Duration) Option {
	return optionFunc(func(c *Controller) error {
		if d <= 0 || d > core.MaxPeriod {
			return fmt.Errorf("%w: WithSharedTTL(%v): want a positive duration up to %v", ErrInvalidConfig, d, core.MaxPeriod)
		}
		c.ttl = d
		return nil
	})
}

// WithOnChange calls f after each change of the limit, on the goroutine
// that ran the update, with the old and new limits and the reason: for a
// gauge, a log line, a span event. f must not call Update.
func WithOnChange(f func(Change)) Option {
	return optionFunc(func(c *Controller) error {
		if f == nil {
			return fmt.Errorf("%w: WithOnChange(nil)", ErrInvalidConfig)
		}
		c.onChange = f
		return nil
	})
}

// WithRule makes [Controller.Override] adapt only the requests of the
// sluice.Stack rule named name; other requests keep their limits.
func WithRule(name string) Option {
	return optionFunc(func(c *Controller) error {
		if name == "" {
			return fmt.Errorf("%w: WithRule(\"\")", ErrInvalidConfig)
		}
		suffix := "/" + name // core.Named's naming
		c.match = func(req core.Request) bool { return strings.HasSuffix(req.Algorithm.Name(), suffix) }
		return nil
	})
}

// WithMatch makes [Controller.Override] adapt only the requests f
// reports; other requests keep their limits. f runs on every decision:
// keep it fast.
func WithMatch(f func(req core.Request) bool) Option {
	return optionFunc(func(c *Controller) error {
		if f == nil {
			return fmt.Errorf("%w: WithMatch(nil)", ErrInvalidConfig)
		}
		c.match = f
		return nil
	})
}

// New returns a controller that starts at initial and adapts it by law.
// The adapted limits keep initial's period and its ratio of burst to rate.
// New fails with an error wrapping [ErrInvalidConfig] for an invalid or
// infinite initial limit, a zero law or one given an option it does not
// take, an option with an invalid value, or bounds that do not hold the
// initial rate.
func New(initial core.Limit, law Law, opts ...Option) (*Controller, error) {
	if err := initial.Validate(); err != nil {
		return nil, fmt.Errorf("%w: initial limit: %w", ErrInvalidConfig, err)
	}
	if initial.IsInf() {
		return nil, fmt.Errorf("%w: the initial limit is unlimited: there is nothing to adapt", ErrInvalidConfig)
	}
	if err := law.validate(); err != nil {
		return nil, err
	}
	rate := float64(initial.Rate())
	c := &Controller{
		law:        law,
		period:     initial.Period(),
		burstRatio: float64(initial.Burst()) / rate,
		min:        1,
		max:        min(rate*DefaultMaxFactor, core.MaxUnits/1000),
		maxStep:    DefaultMaxStep,
		interval:   DefaultInterval,
		rate:       rate,
		increase:   law.cfg.increase,
		stop:       make(chan struct{}),
	}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", ErrInvalidConfig)
		}
		if err := o.apply(c); err != nil {
			return nil, err
		}
	}
	if c.increase == 0 {
		c.increase = rate / 10
	}
	switch {
	case rate < c.min || rate > c.max:
		return nil, fmt.Errorf("%w: the initial rate %v is outside the bounds %v to %v", ErrInvalidConfig, rate, c.min, c.max)
	case c.max > core.MaxUnits/1000:
		return nil, fmt.Errorf("%w: the upper bound %v exceeds 2^52/1000", ErrInvalidConfig, c.max)
	}
	// The largest limit must be valid whatever its rate's units (the
	// worst case is a token of a whole period in µs).
	if b := c.burstFor(c.max); b > core.MaxUnits/initial.PeriodMicros() {
		return nil, fmt.Errorf("%w: at the upper bound %v the burst %d times the period in µs exceeds 2^52; lower the bound", ErrInvalidConfig, c.max, b)
	}
	if c.store != nil {
		if err := c.sharedLimit(); err != nil {
			return nil, err
		}
	}
	l := c.limitFor(rate)
	atomic.StorePointer(&c.limit, unsafe.Pointer(&l))
	c.counts.read(&c.prev)
	return c, nil
}

// sharedLimit fixes the limit of the SharedLimit requests: one write an
// interval, kept for the TTL, a whole number of intervals.
func (c *Controller) sharedLimit() error {
	iv := c.interval.Microseconds()
	n := int64(DefaultTTLIntervals)
	if c.ttl > 0 {
		n = max((c.ttl.Microseconds()+iv-1)/iv, 2)
	}
	if n > int64(core.MaxPeriod/time.Microsecond)/iv {
		return fmt.Errorf("%w: WithSharedTTL: %d intervals of %v exceed %v", ErrInvalidConfig, n, c.interval, core.MaxPeriod)
	}
	c.shared = core.Terms{Algorithm: SharedLimit, Limit: core.Per(n, time.Duration(n*iv)*time.Microsecond).WithBurst(1)}
	if err := c.shared.Limit.Validate(); err != nil {
		return fmt.Errorf("%w: shared value: %w", ErrInvalidConfig, err)
	}
	return SharedLimit.Validate(c.shared.Limit)
}

// burstFor returns the burst of a limit of rate events per period.
func (c *Controller) burstFor(rate float64) int64 {
	return max(int64(math.Round(math.Round(rate)*c.burstRatio)), 1)
}

// limitFor returns the limit of rate events per period, rounded.
func (c *Controller) limitFor(rate float64) core.Limit {
	return core.Per(max(int64(math.Round(rate)), 1), c.period).WithBurst(c.burstFor(rate))
}

// Report records one downstream call: its latency and what became of it.
// It takes no lock and allocates nothing, so it may be called on every
// call. A negative latency, or an unknown outcome, is rejected: Report
// returns an error wrapping [ErrInvalidSample], counts it in
// [Stats].Invalid, and the sample is used for nothing else. The latency of
// a call that did not succeed is not used (see [Failed]).
func (c *Controller) Report(latency time.Duration, o Outcome) error {
	switch {
	case latency < 0:
		c.counts.invalid.Add(1)
		return errNegative
	case o == OK:
		c.counts.hist[bucketOf(uint64(latency))].Add(1)
		c.counts.sum.Add(uint64(latency))
	case o == Failed:
		c.counts.failed.Add(1)
		c.counts.failedSum.Add(uint64(latency))
	case o == Overloaded:
		c.counts.overloaded.Add(1)
	default:
		c.counts.invalid.Add(1)
		return errOutcome
	}
	return nil
}

// Limit returns the current limit.
func (c *Controller) Limit() core.Limit { return *(*core.Limit)(atomic.LoadPointer(&c.limit)) }

// Override returns the limit to decide req under: the current limit for
// the requests the controller adapts (all, unless [WithRule] or
// [WithMatch] says otherwise), req's own for the others. It is the
// function [policy.WithOverride] takes, and costs an atomic load.
//
// [policy.WithOverride]: https://pkg.go.dev/github.com/sluicehq/sluice/policy#WithOverride
func (c *Controller) Override(req core.Request) core.Limit {
	// Small enough to inline into the method value policy.WithOverride
	// holds, so that the request is copied once, not twice: copying it
	// again cost a decision on memstore about 40 ns.
	if c.match == nil {
		return c.Limit()
	}
	return c.matched(&req)
}

// matched is Override for a controller with a scope.
//
//go:noinline
func (c *Controller) matched(req *core.Request) core.Limit {
	if !c.match(*req) {
		return req.Limit
	}
	return c.Limit()
}

// Stats returns the controller's counts.
func (c *Controller) Stats() Stats {
	return Stats{
		Intervals: c.intervals.Load(),
		Samples:   c.samples.Load(),
		Written:   c.written.Load(),
		Adopted:   c.adopted.Load(),
		Local:     c.local.Load(),
		Invalid:   c.counts.invalid.Load(),
	}
}

// Update ends an interval: it applies the law to the calls reported since
// the last update, caps the step, bounds the result and, with a shared
// store, proposes it there and takes what the store holds (see
// [WithShared]). [Controller.Run] calls it once an interval; call it
// yourself to drive the controller on a clock of your own (a simulation,
// a test). An interval with no calls leaves the limit where it is (or
// takes the fleet's).
//
// Update returns the shared store's error, if it failed; the limit has
// then been updated locally. After [Controller.Close] it returns
// [core.ErrClosed] and does nothing.
func (c *Controller) Update(ctx context.Context) error {
	c.runMu.Lock()
	closed := c.closed
	c.runMu.Unlock()
	if closed {
		return core.ErrClosed
	}
	c.mu.Lock()
	c.intervals.Add(1)
	c.counts.read(&c.cur)
	c.delta.since(&c.cur, &c.prev)
	c.prev, c.cur = c.cur, c.prev
	c.samples.Add(c.delta.ok + c.delta.failed + c.delta.overloaded)
	old := c.limitFor(c.rate)
	next, why, ok := c.law.propose(&c.state, c.rate, c.increase, c.interval, &c.delta)
	if ok {
		next = c.bound(min(max(next, c.rate*(1-c.maxStep)), c.rate*(1+c.maxStep)))
	}
	var err error
	local := false
	if c.store != nil {
		next, why, local, err = c.agree(ctx, next, why, ok)
	}
	c.rate = next
	nl := c.limitFor(next)
	changed := nl != old
	if changed {
		atomic.StorePointer(&c.limit, unsafe.Pointer(&nl))
	}
	c.mu.Unlock()
	if changed && c.onChange != nil {
		c.onChange(Change{Old: old, New: nl, Reason: why, Local: local})
	}
	return err
}

// bound keeps rate within the controller's bounds.
func (c *Controller) bound(rate float64) float64 { return min(max(rate, c.min), c.max) }

// agree proposes next (or, if propose is false, only reads) in the shared
// store and returns the rate to take: the proposal if the store took it,
// the fleet's value if one stands, the proposal if the store failed.
func (c *Controller) agree(ctx context.Context, next float64, why Reason, propose bool) (float64, Reason, bool, error) {
	req := core.Request{Key: c.key, Cost: int64(math.Round(next * 1000)), Terms: &c.shared}
	if !propose {
		req.Op = core.OpPeek
	}
	d, err := c.store.Apply(ctx, req)
	switch {
	case err != nil:
		c.local.Add(1)
		return next, why, true, fmt.Errorf("adaptive: shared limit: %w", err)
	case d.Source != core.SourceStore:
		// A fallback answered (fail-open, degrade, a cache): it knows
		// nothing of the fleet.
		c.local.Add(1)
		return next, why, true, nil
	case d.Allowed:
		c.written.Add(1)
		return next, why, false, nil
	case d.Limit > 0:
		c.adopted.Add(1)
		return c.bound(float64(d.Limit) / 1000), ReasonFleet, false, nil
	}
	return next, why, false, nil // nothing shared, nothing proposed
}

// Run updates the controller once an interval until ctx is done or the
// controller is closed, and returns ctx's error or nil. Each update's call
// to the shared store is bounded by one interval. Run's goroutine is the
// caller's; [Controller.Close] makes it return and waits for it. After
// Close, Run returns [core.ErrClosed] at once.
func (c *Controller) Run(ctx context.Context) error {
	c.runMu.Lock()
	if c.closed {
		c.runMu.Unlock()
		return core.ErrClosed
	}
	c.runs.Add(1)
	c.runMu.Unlock()
	defer c.runs.Done()
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.stop:
			return nil
		case <-t.C:
			uctx, cancel := context.WithTimeout(ctx, c.interval)
			_ = c.Update(uctx) // a store failure is counted in Stats and the limit updated locally
			cancel()
		}
	}
}

// Close stops every [Controller.Run] and waits for them to return. Report,
// Limit and Override go on working with the last limit; Update and Run fail
// with [core.ErrClosed]. Close does not close the shared store.
func (c *Controller) Close() error {
	c.runMu.Lock()
	if !c.closed {
		c.closed = true
		close(c.stop)
	}
	c.runMu.Unlock()
	c.runs.Wait()
	return nil
}
