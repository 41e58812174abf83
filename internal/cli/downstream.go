package cli

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/core"
)

// The defaults of the downstream model and of adaptive mode. The control
// interval, the latency threshold and the laws' parameters are those
// under which docs/adaptive.md measured the laws converging on a
// downstream of this kind.
const (
	defaultDownstreamLatency = "20ms"
	defaultAdaptInterval     = "100ms"
	// defaultAdaptLimit is the initial limit under -adapt without -limit:
	// well below most capacities, with a burst a tenth of the rate, which
	// the adapted limits keep (a burst as large as the rate would let a
	// queue of its own build at once).
	defaultAdaptLimit = "20/s burst 2"
	// defaultAdaptGrowth is the gradient law's Growth: faster than its
	// default of 1, so that a run of a minute has time to find the
	// capacity.
	defaultAdaptGrowth = "1.5"
	// adaptThresholdFactor times the latency at rest is AIMD's default
	// threshold for its 99th percentile, as docs/adaptive.md advises.
	adaptThresholdFactor = 2
	// adaptMaxFactor bounds the adapted rate at this many times the
	// initial rate, adaptive's own default bound.
	adaptMaxFactor = adaptive.DefaultMaxFactor
)

// The laws -adapt names.
const (
	lawAIMD     = "aimd"
	lawGradient = "gradient"
)

// capacityStep is the downstream's capacity from an offset on: n requests
// every period µs.
type capacityStep struct {
	at        int64 // µs from the start; the first step's is 0
	n, period int64
	text      string // as the user wrote it: 100/s
}

// perSecond returns the step's capacity in requests a second.
func (s capacityStep) perSecond() float64 { return float64(s.n) * 1e6 / float64(s.period) }

// downstreamConfig is a parsed -downstream and its companions.
type downstreamConfig struct {
	steps []capacityStep // by offset, the first at 0
	base  time.Duration  // latency at rest, > 0
}

// parseCapacity parses -downstream's capacity, a RATE.
func parseCapacity(s string) (capacityStep, error) {
	n, p, err := parseTrafficRate(s)
	if err != nil {
		return capacityStep{}, err
	}
	return capacityStep{n: n, period: p, text: s}, nil
}

// parseCapacityChanges parses the -capacity-change values, each a comma
// list of AT:RATE, into capacity steps in time order. Every AT must fall
// inside the run (after 0, before dur) and none may repeat.
func parseCapacityChanges(values []string, dur time.Duration) ([]capacityStep, error) {
	type change struct {
		capacityStep
		item string // as given: 30s:100/s
	}
	var changes []change
	for _, v := range values {
		for item := range strings.SplitSeq(v, ",") {
			item = strings.TrimSpace(item)
			at, rate, ok := strings.Cut(item, ":")
			if !ok {
				return nil, fmt.Errorf("%q: want AT:RATE, such as 30s:100/s", item)
			}
			d, err := parseDuration(at)
			if err != nil {
				return nil, fmt.Errorf("%q: instant %q: %v", item, at, err)
			}
			if d >= dur {
				return nil, fmt.Errorf("%q: %s is not before the end of the run, -duration %s", item, at, duration(dur))
			}
			step, err := parseCapacity(rate)
			if err != nil {
				return nil, fmt.Errorf("%q: %v", item, err)
			}
			step.at = d.Microseconds()
			changes = append(changes, change{step, item})
		}
	}
	slices.SortStableFunc(changes, func(a, b change) int { return cmp.Compare(a.at, b.at) })
	steps := make([]capacityStep, len(changes))
	for i, c := range changes {
		if i > 0 && c.at == changes[i-1].at {
			return nil, fmt.Errorf("%q and %q: two capacities at one instant", changes[i-1].item, c.item)
		}
		steps[i] = c.capacityStep
	}
	return steps, nil
}

// String describes the downstream as the table's header does: "capacity
// 200/s, 100/s from 30s; 20ms at rest".
func (c *downstreamConfig) String() string {
	var b strings.Builder
	b.WriteString("capacity " + c.steps[0].text)
	for _, s := range c.steps[1:] {
		fmt.Fprintf(&b, ", %s from %s", s.text, duration(time.Duration(s.at)*time.Microsecond))
	}
	fmt.Fprintf(&b, "; latency %s at rest", duration(c.base))
	return b.String()
}

// meanCapacity returns the capacity in requests a second over a run of
// dur, on average over time.
func (c *downstreamConfig) meanCapacity(dur time.Duration) float64 {
	var sum float64 // requests
	for i, s := range c.steps {
		end := dur.Microseconds()
		if i+1 < len(c.steps) {
			end = c.steps[i+1].at
		}
		sum += s.perSecond() * float64(end-s.at) / 1e6
	}
	return sum / dur.Seconds()
}

// capacityAt returns the capacity in requests a second at off µs.
func (c *downstreamConfig) capacityAt(off int64) float64 {
	i, _ := slices.BinarySearchFunc(c.steps, off, func(s capacityStep, off int64) int {
		if s.at <= off {
			return -1
		}
		return 1
	})
	return c.steps[max(i-1, 0)].perSecond()
}

// downstream is the model of the service behind the limiter: one FIFO
// queue served at the capacity in force, as a fluid. A request waits for
// the backlog ahead of it to be served, then takes the latency at rest:
// its latency is flat while requests arrive more slowly than the capacity
// serves them, and grows with the queue beyond it. There is no timeout:
// a queue past capacity only grows, as the latency column shows.
//
// The backlog is served across capacity changes at each step's own rate,
// so a request's wait is exact however the capacity changes while it
// waits, and completions come in the order of arrival.
type downstream struct {
	cfg     *downstreamConfig
	backlog float64 // requests waiting, as a fluid
	last    int64   // µs: the instant backlog was last brought up to date
	step    int     // the step in force at last
}

// advance serves the backlog from the last instant to off µs, at each
// capacity in force on the way.
func (d *downstream) advance(off int64) {
	steps := d.cfg.steps
	for d.last < off {
		until, next := off, d.step+1 < len(steps)
		if next {
			until = min(until, steps[d.step+1].at)
		}
		d.backlog = max(d.backlog-steps[d.step].perSecond()*float64(until-d.last)/1e6, 0)
		d.last = until
		if next && steps[d.step+1].at == until {
			d.step++
		}
	}
}

// wait returns how long the backlog at the last instant takes to be
// served, in µs, following the capacity through its later changes.
func (d *downstream) wait() float64 {
	left, at := d.backlog, d.last
	for i := d.step; ; i++ {
		rate := d.cfg.steps[i].perSecond() / 1e6 // requests a µs
		if i+1 == len(d.cfg.steps) || left <= rate*float64(d.cfg.steps[i+1].at-at) {
			return float64(at-d.last) + left/rate
		}
		left -= rate * float64(d.cfg.steps[i+1].at-at)
		at = d.cfg.steps[i+1].at
	}
}

// maxWait caps a request's wait, far beyond any run's duration, so that
// a queue fed for long past a tiny capacity cannot overflow a
// time.Duration.
const maxWait = maxOffset

// admit queues a request arriving at off µs and returns its latency: the
// latency at rest plus its wait for the requests ahead of it.
func (d *downstream) admit(off int64) time.Duration {
	d.advance(off)
	wait := time.Duration(math.Round(min(d.wait()*1e3, float64(maxWait))))
	d.backlog++
	return d.cfg.base + wait
}

// adaptConfig is a parsed -adapt and its companions.
type adaptConfig struct {
	name     string // lawAIMD or lawGradient
	law      adaptive.Law
	interval time.Duration // between updates, whole µs from 1ms to 1h
}

// lawFlags are the flags that set a law's parameters, each the
// parameter of one law.
var lawFlags = map[string]string{
	"adapt-threshold": lawAIMD,
	"adapt-increase":  lawAIMD,
	"adapt-growth":    lawGradient,
}

// lawParams are the parameters of the laws as the flags give them; each
// law reads its own.
type lawParams struct {
	threshold time.Duration // AIMD's; 0: twice the latency at rest
	increase  float64       // AIMD's; 0: adaptive's default
	growth    float64       // the gradient law's
}

// newAdaptConfig returns the law named name with its parameters, and
// checks that its controller can start at initial and adapt the limit of
// alg within its bounds. base is the downstream's latency at rest.
func newAdaptConfig(name string, interval time.Duration, params lawParams, base time.Duration, initial core.Limit, alg core.Algorithm) (*adaptConfig, error) {
	cfg := &adaptConfig{name: name, interval: interval}
	switch name {
	case lawAIMD:
		threshold := cmp.Or(params.threshold, adaptThresholdFactor*base)
		opts := []adaptive.LawOption{adaptive.LatencyAbove(0.99, threshold)}
		if params.increase != 0 {
			opts = append(opts, adaptive.Increase(params.increase))
		}
		cfg.law = adaptive.AIMD(opts...)
	case lawGradient:
		cfg.law = adaptive.Gradient(adaptive.Growth(params.growth))
	default:
		return nil, fmt.Errorf("-adapt %q: unknown law; want %s or %s", name, lawAIMD, lawGradient)
	}
	if interval < time.Millisecond || interval > time.Hour {
		return nil, fmt.Errorf("-adapt-interval %s: want 1ms to 1h", duration(interval))
	}
	if _, err := cfg.newController(initial); err != nil {
		return nil, fmt.Errorf("-adapt %s with -limit %v: %w", name, initial, err)
	}
	// The controller keeps the initial period and ratio of burst to rate,
	// so the largest limit it may set is known now; the algorithm must
	// take it, or the run would fail halfway.
	top := initial.Rate() * adaptMaxFactor
	burst := max(int64(math.Round(float64(top)*float64(initial.Burst())/float64(initial.Rate()))), 1)
	upper := core.Per(top, initial.Period()).WithBurst(burst)
	if err := cmp.Or(upper.Validate(), alg.Validate(upper)); err != nil {
		return nil, fmt.Errorf("-adapt %s: the limit may grow to %d times the initial rate, %v, which %s cannot take: %w; lower -limit",
			name, adaptMaxFactor, upper, alg.Name(), err)
	}
	return cfg, nil
}

// newController returns a controller of the configured law, starting at
// initial.
func (c *adaptConfig) newController(initial core.Limit) (*adaptive.Controller, error) {
	return adaptive.New(initial, c.law, adaptive.WithInterval(c.interval),
		adaptive.WithBounds(1, initial.Rate()*adaptMaxFactor))
}

// perSecond returns l's rate in events a second.
func perSecond(l core.Limit) float64 { return float64(l.Rate()) / l.Period().Seconds() }
