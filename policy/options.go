package policy

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sluicehq/sluice/core"
)

// Defaults for a [Breaker]'s options.
const (
	// DefaultTimeout is the per-call deadline's floor: a call to the
	// store that has not answered within it, of this process's time (see
	// [WithTimeout]), counts as a failure, unless the store's recent
	// latency has raised the deadline. A healthy Redis answers in a
	// fraction of a millisecond; what a floor must also cover is this
	// process: on a busy process a goroutine ready to run can wait a Go
	// scheduler's time slice (10 ms) for a processor, and the client's
	// sender that waits so holds every call of its round. 16 ms covers a
	// slice and a round trip, and is the most that lets a lone caller's
	// five timeouts cut off a dead store within 100 ms (see [WithTrip]).
	DefaultTimeout = 16 * time.Millisecond
	// DefaultMaxTimeout is the per-call deadline's ceiling: the most the
	// store's latency raises it to (see [WithMaxTimeout]). A busy host
	// slows a local Redis's replies to 10 to 20 ms at the 99.9th
	// percentile; 100 ms leaves room for a host busier than that, and
	// is still far below a caller's patience.
	DefaultMaxTimeout = 100 * time.Millisecond
	// DefaultOpenTimeout is how long the circuit stays open before it lets
	// probes through.
	DefaultOpenTimeout = time.Second
	// DefaultProbes is how many calls the half-open circuit lets through;
	// that many successes in a row close it.
	DefaultProbes = 3
	// DefaultMinFailures and DefaultFailureRatio are the trip condition:
	// the circuit opens once at least 5 calls have failed within the
	// window and failures are at least half the calls that completed.
	DefaultMinFailures  = 5
	DefaultFailureRatio = 0.5
	// DefaultWindow is the span of the process clock over which failures
	// are counted. It rolls in tenths: a failure is forgotten between 0.9
	// and 1 window later.
	DefaultWindow = time.Second
	// DefaultName is the breaker's name unless [WithName] gives another.
	DefaultName = "sluice"
)

// Bounds on options, so that a typo cannot make a breaker that never
// answers or never probes.
const (
	maxTimeout     = time.Minute
	maxOpenTimeout = time.Hour
	minWindow      = 10 * time.Millisecond
	maxWindow      = time.Hour
	maxProbes      = 1000
	maxInstances   = 1 << 20
)

// runSpan is how many per-call deadlines, on the process clock, a run of
// failures must span to open the circuit (see [WithTrip] and
// runDeadline): longer than a stall that fails the calls in flight
// together (within a deadline of one another), short enough to cut off a
// dead store within about four deadlines (64 ms at the default floor).
const runSpan = 3

// ErrInvalidOption reports an option [NewBreaker] cannot use; the error
// says which and why.
var ErrInvalidOption = errors.New("policy: invalid option")

// A BreakerOption configures [NewBreaker]. The options are the With…
// functions of this package.
type BreakerOption interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	name        string
	timeout     time.Duration
	maxTimeout  time.Duration
	openTimeout time.Duration
	probes      int
	minFailures int
	ratio       float64
	window      time.Duration
	mode        Mode
	instances   int
	local       core.Store
	onChange    func(Change)
}

func defaultConfig() config {
	return config{
		name:        DefaultName,
		timeout:     DefaultTimeout,
		openTimeout: DefaultOpenTimeout,
		probes:      DefaultProbes,
		minFailures: DefaultMinFailures,
		ratio:       DefaultFailureRatio,
		window:      DefaultWindow,
		mode:        FailOpen,
		instances:   1,
	}
}

func (c *config) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
	}
	switch {
	case c.timeout <= 0 || c.timeout > maxTimeout:
		return bad("WithTimeout(%v): the per-call deadline must be above 0 and at most %v", c.timeout, maxTimeout)
	case c.maxTimeout != 0 && (c.maxTimeout < c.timeout || c.maxTimeout > maxTimeout):
		return bad("WithMaxTimeout(%v): the per-call deadline's ceiling must be at least WithTimeout's %v and at most %v", c.maxTimeout, c.timeout, maxTimeout)
	case c.openTimeout <= 0 || c.openTimeout > maxOpenTimeout:
		return bad("WithOpenTimeout(%v): must be above 0 and at most %v", c.openTimeout, maxOpenTimeout)
	case c.probes < 1 || c.probes > maxProbes:
		return bad("WithProbes(%d): must be 1 to %d", c.probes, maxProbes)
	case c.minFailures < 1 || c.minFailures > math.MaxUint32:
		return bad("WithTrip(%d, %v): at least 1 failure must trip the circuit", c.minFailures, c.ratio)
	case !(c.ratio > 0 && c.ratio <= 1): // also rejects NaN
		return bad("WithTrip(%d, %v): the failure ratio must be above 0 and at most 1", c.minFailures, c.ratio)
	case c.window < minWindow || c.window > maxWindow:
		return bad("WithWindow(%v): must be %v to %v", c.window, minWindow, maxWindow)
	case !c.mode.valid():
		return bad("WithMode(%v): unknown mode", c.mode)
	case c.instances < 1 || c.instances > maxInstances:
		return bad("WithInstances(%d): must be 1 to %d", c.instances, maxInstances)
	case c.mode == Degrade && c.local == nil:
		return bad("WithMode(degrade) needs WithLocal: the store to decide on while the circuit is open")
	}
	return nil
}

// DeadlineChecker is implemented by a store that can tell whether its
// client would fail calls before the breaker's per-call deadline for
// reasons of its own rather than the store's slowness, which the breaker
// would count as the store's failures. [NewBreaker] calls CheckDeadline
// on every store of the chain it wraps that implements it ([core.Chain]).
// A store behind a decorator without Unwrap is not asked.
//
// redisstore's Store implements it: it fails when the go-redis client's
// PoolTimeout is shorter than both the deadline and the client's
// ReadTimeout, which would turn the client's own queueing for a
// connection, on a healthy Redis, into failures that open the circuit.
type DeadlineChecker interface {
	// CheckDeadline returns nil if the store's client lets a call run
	// until the per-call deadline d or until the store is too slow to
	// answer it, else an error naming the client's setting that does
	// not and how to change it.
	CheckDeadline(d time.Duration) error
}

// checkStores asks each [DeadlineChecker] of the chain from remote inward
// whether its client allows the per-call deadline d.
func checkStores(remote core.Store, d time.Duration) error {
	for s := range core.Chain(remote) {
		if c, ok := s.(DeadlineChecker); ok {
			if err := c.CheckDeadline(d); err != nil {
				return fmt.Errorf("%w: WithTimeout(%v): %w", ErrInvalidOption, d, err)
			}
		}
	}
	return nil
}

// WithName names the breaker, as [Change] and logs report it. The default
// is [DefaultName].
func WithName(name string) BreakerOption {
	return optionFunc(func(c *config) { c.name = name })
}

// WithTimeout sets the per-call deadline's floor. Each call to the store
// runs until the store answers, or until this process has run for the
// deadline since the call began, or the caller's context ends, if that
// is sooner; a call that has not answered by then is a failure. The
// deadline is kept on the process clock: the time the process was not
// running (frozen at its CPU quota, waiting for a core, paused by the
// collector) does not count, so a stall of the process is not taken for
// the store's slowness. And it adapts to the store: three times the
// 99.9th percentile of the time recent answers took, never below d and
// never above the ceiling ([WithMaxTimeout]). Calls that start within a
// sixteenth of the deadline share one, so each has at least fifteen
// sixteenths of it. d must be above 0 and at most a minute. The default
// is [DefaultTimeout], 16 ms; docs/outages.md explains the choice.
func WithTimeout(d time.Duration) BreakerOption {
	return optionFunc(func(c *config) { c.timeout = d })
}

// WithMaxTimeout sets the per-call deadline's ceiling: however slow the
// store's recent answers, a call waits for it no longer than d of the
// process's time (see [WithTimeout]). d must be at least the floor, and
// at most a minute. The default is [DefaultMaxTimeout], 100 ms, or the
// floor if that is longer; set it to the floor for a fixed deadline.
func WithMaxTimeout(d time.Duration) BreakerOption {
	return optionFunc(func(c *config) { c.maxTimeout = d })
}

// WithOpenTimeout sets how long the circuit stays open after it trips (or
// after a probe fails) before it lets probes through. d must be above 0
// and at most an hour. The default is [DefaultOpenTimeout], 1 second.
func WithOpenTimeout(d time.Duration) BreakerOption {
	return optionFunc(func(c *config) { c.openTimeout = d })
}

// WithProbes sets how many calls the half-open circuit lets through to the
// store at once; that many successes in a row close the circuit, and any
// failure opens it again. Other calls meanwhile get the mode's answer. n
// must be 1 to 1000. The default is [DefaultProbes], 3.
func WithProbes(n int) BreakerOption {
	return optionFunc(func(c *config) { c.probes = n })
}

// WithTrip sets when the closed circuit opens: once at least minFailures
// calls have failed within the window (see [WithWindow]) and either
//
//   - the failures are at least ratio (0 < ratio ≤ 1) of the calls that
//     completed in it with a success or a failure, or
//   - the last minFailures calls or more failed with no success between
//     them, the first of them at least three per-call deadlines before the
//     last: the store has answered nothing for that long. This rule's
//     window and deadlines run on the breaker's process clock, which
//     leaves out the time the process was not running. The deadline is
//     the one adapted to the store's latency if a call of the run timed
//     out, and its floor ([WithTimeout]; three floors make 48 ms by
//     default) if every call failed with the store's own error (a refused
//     connection, an OOM or READONLY reply), which no stall of this
//     process can cause.
//
// The defaults are [DefaultMinFailures] and [DefaultFailureRatio]: 5
// failures, and half the calls.
//
// The run opens the circuit of a dead or unreachable store within about
// four deadlines whatever the traffic (a refusing one within four
// floors), where the ratio must first
// outweigh the window's earlier successes (on a busy service, most of a
// window). Neither opens on a brief stall, which fails every call in
// flight at once: such failures come within a deadline or two of one
// another, and the successes around them keep the ratio low.
// minFailures keeps a quiet service from opening on a single failure.
// For the same reason the circuit does not trip within a tenth of the
// window after it closes, or after [NewBreaker]: the first calls after an
// outage, or after a start, open the client's connections, and a burst of
// them can outlast the deadline together; judged on them alone, a healthy
// Redis would be cut off at once. Their failures still count once that
// tenth has passed, and each gets the mode's answer.
// A service that makes fewer than minFailures calls per window never
// opens the circuit, but each failing call still gets the mode's answer
// within the per-call deadline.
func WithTrip(minFailures int, ratio float64) BreakerOption {
	return optionFunc(func(c *config) { c.minFailures, c.ratio = minFailures, ratio })
}

// WithWindow sets the span over which failures and successes are counted
// while the circuit is closed, on the process clock (see [WithTimeout]):
// the time this process did not run does not count. It rolls in tenths.
// d must be 10 ms to an hour. The default is [DefaultWindow], 1 second.
func WithWindow(d time.Duration) BreakerOption {
	return optionFunc(func(c *config) { c.window = d })
}

// WithMode sets the mode of the breaker's own answers (see [Mode]); views
// made with [Breaker.WithMode] answer with theirs. The default is
// [FailOpen].
func WithMode(m Mode) BreakerOption {
	return optionFunc(func(c *config) { c.mode = m })
}

// WithInstances sets how many instances of the service share the limits,
// for [Degrade]: each decides locally under the limit divided by n (see
// [Degrade] for the rounding). n must be 1 to 2^20. The default is 1,
// right only for a service that runs alone: set it to your fleet's size,
// or a little below it if the fleet scales down.
func WithInstances(n int) BreakerOption {
	return optionFunc(func(c *config) { c.instances = n })
}

// WithLocal gives the breaker the store [Degrade] decides on while the
// remote store cannot, such as a memstore.Store of its own (bound its
// keys with memstore.Config.MaxKeys). The breaker owns it: its Reset
// reaches it and its Close closes it. Its state outlives each outage, so
// that what this instance admitted on its own still counts if the store
// fails again within the limits' periods. Degrade, in [WithMode] or
// [Breaker.WithMode], needs it; the other modes never call it.
func WithLocal(s core.Store) BreakerOption {
	return optionFunc(func(c *config) { c.local = s })
}

// WithOnChange sets a function told of every change of the circuit's
// state, in order. It runs on the goroutine of a call that made or saw
// the change, at the call's end, once the breaker has released its locks
// and the call no longer counts as in flight, so it may call
// the breaker (its own calls deliver nothing meanwhile: no re-entrancy).
// While it runs, later changes wait for it, and other callers are not
// held up: keep it short, and never block in it. It is never called for
// two changes at once. The default is none.
func WithOnChange(f func(Change)) BreakerOption {
	return optionFunc(func(c *config) { c.onChange = f })
}
