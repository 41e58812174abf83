package adaptive

import (
	"fmt"
	"math"
	"time"
)

// Law is a control law: the rule by which a [Controller] turns one
// interval's signals into its next limit. Make one with [AIMD] or
// [Gradient] and the [LawOption]s they accept; a Law is a small value,
// safe to copy and to share between controllers, each of which keeps the
// law's state (the gradient law's long-term latency) for itself.
//
// The zero Law is no law: [New] rejects it.
//
// Both laws back off multiplicatively (by [Backoff]) in an interval in
// which the downstream reported overload, or in which the share of failed
// calls passed [ErrorRatio]; they differ in what they do with latency.
type Law struct {
	kind lawKind
	cfg  lawConfig
	err  error // the first option the law could not use
}

type lawKind uint8

const (
	noLaw lawKind = iota
	aimdLaw
	gradientLaw
)

// lawConfig holds every law's parameters; each law reads its own.
type lawConfig struct {
	// AIMD
	threshold time.Duration // latency above which it backs off; 0: latency is not used
	quantile  float64       // of the interval's latencies, compared with threshold
	increase  float64       // events per period added in a healthy interval; 0: default
	// both
	backoff    float64 // factor applied on overload, errors (and AIMD latency)
	errorRatio float64 // share of failed calls that counts as unhealthy
	// Gradient
	tolerance  float64 // short latency may reach tolerance × long before the limit falls
	smoothing  float64 // weight of the new target against the current limit
	longWindow int     // intervals whose lowest short-term latency is the long-term one
	growth     float64 // k in the healthy target limit + k·√limit
}

// The laws' defaults, documented on the options that change them.
const (
	defaultQuantile   = 0.99
	defaultBackoff    = 0.9
	defaultErrorRatio = 0.1
	defaultTolerance  = 1.5
	defaultSmoothing  = 0.2
	defaultLongWindow = 30
	defaultGrowth     = 1.0
)

// AIMD returns the additive-increase, multiplicative-decrease law: in an
// interval in which the downstream was healthy the limit rises by a fixed
// amount ([Increase]); in one in which it was not, the limit is multiplied
// by [Backoff]. An interval is unhealthy if the downstream reported
// overload, if failed calls passed [ErrorRatio], or, with [LatencyAbove],
// if a quantile of the successful calls' latency passed a threshold.
//
// AIMD is the law of TCP congestion control: simple, predictable, and
// fair between senders, at the price of a sawtooth around the capacity
// whose depth is set by Backoff. It needs a latency threshold from you:
// choose it when you know what latency means "overloaded".
func AIMD(opts ...LawOption) Law {
	l := Law{kind: aimdLaw, cfg: lawConfig{
		quantile:   defaultQuantile,
		backoff:    defaultBackoff,
		errorRatio: defaultErrorRatio,
	}}
	l.apply(opts)
	return l
}

// Gradient returns the gradient law, after Netflix's Gradient2: it
// compares the short-term latency (the mean of the interval's successful
// calls) with the long-term one (the lowest short-term latency of the
// last [LongWindow] intervals, as Vegas's base round trip). The gradient
// is
//
//	g = clamp(tolerance × long / short, 0.5, 1)
//
// and the limit moves towards the target limit × g + k·√limit by the
// [Smoothing] fraction of the distance: while latency stays within
// [Tolerance] times its long-term value, g is 1 and the limit grows by
// about Smoothing × k·√limit an interval ([Growth]); as queues build and
// latency rises, g falls and the limit falls with it, by at most half an
// interval before smoothing.
//
// The gradient law needs no latency threshold: it learns what latency is
// normal. It suits a downstream whose latency under load you cannot
// predict. A windowed minimum rather than Gradient2's average: a rate
// limit does not bound the queue it builds, and an average follows a
// slowly growing queue's latency up (docs/adaptive.md).
func Gradient(opts ...LawOption) Law {
	l := Law{kind: gradientLaw, cfg: lawConfig{
		backoff:    defaultBackoff,
		errorRatio: defaultErrorRatio,
		tolerance:  defaultTolerance,
		smoothing:  defaultSmoothing,
		longWindow: defaultLongWindow,
		growth:     defaultGrowth,
	}}
	l.apply(opts)
	return l
}

func (l *Law) apply(opts []LawOption) {
	for _, o := range opts {
		if o == nil {
			l.err = fmt.Errorf("%w: nil law option", ErrInvalidConfig)
			return
		}
		if err := o.applyLaw(l); err != nil {
			l.err = err
			return
		}
	}
}

// String returns the law's name and parameters, such as
// "aimd(p99 > 50ms, +10, ×0.9, errors > 10%)".
func (l Law) String() string {
	c := l.cfg
	switch l.kind {
	case aimdLaw:
		lat := "latency unused"
		if c.threshold > 0 {
			lat = fmt.Sprintf("p%g > %v", c.quantile*100, c.threshold)
		}
		inc := "+rate/10"
		if c.increase > 0 {
			inc = fmt.Sprintf("+%g", c.increase)
		}
		return fmt.Sprintf("aimd(%s, %s, ×%g, errors > %g%%)", lat, inc, c.backoff, c.errorRatio*100)
	case gradientLaw:
		return fmt.Sprintf("gradient(tolerance %g, smoothing %g, long %d, growth %g·√limit, ×%g, errors > %g%%)",
			c.tolerance, c.smoothing, c.longWindow, c.growth, c.backoff, c.errorRatio*100)
	}
	return "no law"
}

// validate reports a law New cannot use.
func (l Law) validate() error {
	switch {
	case l.err != nil:
		return l.err
	case l.kind == noLaw:
		return fmt.Errorf("%w: no law; use AIMD or Gradient", ErrInvalidConfig)
	}
	return nil
}

// LawOption configures a [Law]. Each option says which laws accept it; a
// law given an option it does not accept is rejected by [New].
type LawOption interface {
	applyLaw(*Law) error
}

type lawOption struct {
	name  string
	laws  []lawKind // the laws that accept it
	check func(*lawConfig) error
}

func (o lawOption) applyLaw(l *Law) error {
	for _, k := range o.laws {
		if k == l.kind {
			return o.check(&l.cfg)
		}
	}
	return fmt.Errorf("%w: %s does not apply to the %s law", ErrInvalidConfig, o.name, l.kind)
}

func (k lawKind) String() string {
	switch k {
	case aimdLaw:
		return "AIMD"
	case gradientLaw:
		return "gradient"
	}
	return "zero"
}

// finite reports whether f is a number other than ±Inf and NaN.
func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// LatencyAbove makes the AIMD law back off in an interval in which the
// q-quantile (0 < q ≤ 1, such as 0.99) of its successful calls' latency
// passed threshold (positive). Quantiles are read from a histogram whose
// buckets are 1/16 of a power of two wide, so a quantile is known within
// about 3 %. Without it the AIMD law ignores latency and backs off only
// on errors and overload.
func LatencyAbove(q float64, threshold time.Duration) LawOption {
	return lawOption{name: "LatencyAbove", laws: []lawKind{aimdLaw}, check: func(c *lawConfig) error {
		switch {
		case !(q > 0 && q <= 1):
			return fmt.Errorf("%w: LatencyAbove quantile %v is not in (0, 1]", ErrInvalidConfig, q)
		case threshold <= 0:
			return fmt.Errorf("%w: LatencyAbove threshold %v is not positive", ErrInvalidConfig, threshold)
		}
		c.quantile, c.threshold = q, threshold
		return nil
	}}
}

// Increase sets how much the AIMD law adds to the limit in a healthy
// interval, in events per the limit's period (a positive, finite number;
// fractions accumulate). The default is a tenth of the initial limit's
// rate.
func Increase(n float64) LawOption {
	return lawOption{name: "Increase", laws: []lawKind{aimdLaw}, check: func(c *lawConfig) error {
		if !(n > 0) || !finite(n) {
			return fmt.Errorf("%w: Increase %v is not a positive number", ErrInvalidConfig, n)
		}
		c.increase = n
		return nil
	}}
}

// Backoff sets the factor (0 < f < 1) a law multiplies the limit by in an
// unhealthy interval: for AIMD one with overload, errors or high latency,
// for the gradient law one with overload or errors. The default is 0.9.
func Backoff(f float64) LawOption {
	return lawOption{name: "Backoff", laws: []lawKind{aimdLaw, gradientLaw}, check: func(c *lawConfig) error {
		if !(f > 0 && f < 1) {
			return fmt.Errorf("%w: Backoff %v is not in (0, 1)", ErrInvalidConfig, f)
		}
		c.backoff = f
		return nil
	}}
}

// ErrorRatio sets the share of an interval's calls (0 < r ≤ 1) that may
// fail ([Failed]) before a law backs off. The default is 0.1: an interval
// in which more than one call in ten failed is unhealthy.
func ErrorRatio(r float64) LawOption {
	return lawOption{name: "ErrorRatio", laws: []lawKind{aimdLaw, gradientLaw}, check: func(c *lawConfig) error {
		if !(r > 0 && r <= 1) {
			return fmt.Errorf("%w: ErrorRatio %v is not in (0, 1]", ErrInvalidConfig, r)
		}
		c.errorRatio = r
		return nil
	}}
}

// Tolerance sets how far the gradient law lets the short-term latency
// rise above the long-term one before it lowers the limit (t ≥ 1): at
// 1.5, the default, latency may grow by half. Lower values hold latency
// closer to its baseline and leave more capacity unused.
func Tolerance(t float64) LawOption {
	return lawOption{name: "Tolerance", laws: []lawKind{gradientLaw}, check: func(c *lawConfig) error {
		if !(t >= 1) || !finite(t) {
			return fmt.Errorf("%w: Tolerance %v is not a number of at least 1", ErrInvalidConfig, t)
		}
		c.tolerance = t
		return nil
	}}
}

// Smoothing sets the fraction (0 < s ≤ 1) of the distance to its target
// the gradient law moves the limit each interval. The default is 0.2:
// smaller is steadier and slower.
func Smoothing(s float64) LawOption {
	return lawOption{name: "Smoothing", laws: []lawKind{gradientLaw}, check: func(c *lawConfig) error {
		if !(s > 0 && s <= 1) {
			return fmt.Errorf("%w: Smoothing %v is not in (0, 1]", ErrInvalidConfig, s)
		}
		c.smoothing = s
		return nil
	}}
}

// LongWindow sets the number of intervals (2 to 10,000) whose lowest
// short-term latency is the gradient law's long-term latency. The default
// is 30.
func LongWindow(n int) LawOption {
	return lawOption{name: "LongWindow", laws: []lawKind{gradientLaw}, check: func(c *lawConfig) error {
		if n < 2 || n > 10000 {
			return fmt.Errorf("%w: LongWindow %d is not in 2 to 10000", ErrInvalidConfig, n)
		}
		c.longWindow = n
		return nil
	}}
}

// Growth sets k in the gradient law's healthy target, limit + k·√limit
// (k positive and finite): how fast it probes for more capacity. The
// default is 1; with the default smoothing a limit of 100 grows by 2 an
// interval.
func Growth(k float64) LawOption {
	return lawOption{name: "Growth", laws: []lawKind{gradientLaw}, check: func(c *lawConfig) error {
		if !(k > 0) || !finite(k) {
			return fmt.Errorf("%w: Growth %v is not a positive number", ErrInvalidConfig, k)
		}
		c.growth = k
		return nil
	}}
}

// lawState is what a controller keeps of its law between intervals.
type lawState struct {
	hold int       // intervals in which a failure cut is repeated only if failures grow
	cut  float64   // the share of failed (or refused) calls at the last such cut
	prev float64   // the last interval's latency (AIMD's quantile, the gradient's mean), ns
	mean float64   // AIMD: the last interval's mean latency, ns
	ring []float64 // the gradient law's last short-term latencies, ns; 0: none
	at   int       // where the next goes in ring
}

// remember records short, the interval's short-term latency, among the
// last n and returns the long-term latency: the lowest of them.
//
// The long-term latency is a windowed minimum, as Vegas's base RTT,
// rather than Gradient2's exponential average: a rate limit, unlike a
// concurrency limit, does not bound the queue it builds, and an average
// follows the queue's latency up as it builds slowly, so that the law
// raised the limit ever further above capacity (a simulated downstream of
// 200/s saw limits swing from 40 to 440). The minimum is the latency of
// the last interval without a queue; it rises with the downstream's own
// latency once no interval of the window was that fast.
func (st *lawState) remember(short float64, n int) float64 {
	if len(st.ring) != n {
		st.ring, st.at = make([]float64, n), 0
	}
	st.ring[st.at] = short
	st.at = (st.at + 1) % n
	long := short
	for _, v := range st.ring {
		if v > 0 && v < long {
			long = v
		}
	}
	return long
}

// propose returns the law's next rate from rate after an interval with
// signals s, and why; ok is false when the interval brought nothing to
// act on (no calls reported), and the limit holds.
func (l *Law) propose(st *lawState, rate, increase float64, interval time.Duration, s *signals) (next float64, why Reason, ok bool) {
	total := s.ok + s.failed + s.overloaded
	if total == 0 {
		return rate, ReasonHold, false
	}
	c := &l.cfg
	// Refusals and failures cut the limit by Backoff, or by the share of
	// calls they took if that is more: a downstream that fails nine calls
	// in ten at 2000/s serves about 200/s, and multiplying by 0.9 an
	// interval would take 22 intervals to find it, overloading it all the
	// while. A share, unlike a count, means the same to every controller
	// of a fleet, each of which sees its own part of the calls.
	//
	// Calls made before a cut go on failing after it, for as long as they
	// take (a timeout), so for that long a cut is repeated only if the
	// share grows: cutting again for the old calls' failures would take
	// the limit to its floor.
	bad, why := s.overloaded, ReasonOverload
	if s.overloaded == 0 {
		bad, why = s.failed, ReasonErrors
	}
	share := float64(bad) / float64(total)
	if st.hold > 0 {
		st.hold--
	}
	if bad > 0 && (why == ReasonOverload || share > c.errorRatio) {
		if st.hold > 0 && share <= st.cut {
			return rate, ReasonHold, true
		}
		st.hold = int(math.Ceil(float64(s.slowest()) / float64(interval)))
		st.cut = share
		return rate * min(c.backoff, 1-share), why, true
	}
	switch l.kind {
	case aimdLaw:
		if c.threshold <= 0 || s.ok == 0 {
			return rate + increase, ReasonHealthy, true
		}
		q := float64(s.quantile(c.quantile))
		mean := float64(s.sum) / float64(s.ok)
		prev, prevMean := st.prev, st.mean
		st.prev, st.mean = q, mean
		switch {
		case q <= float64(c.threshold):
			return rate + increase, ReasonHealthy, true
		case q < prev || q == prev && mean < prevMean:
			// Still too slow, but better than the last interval: the
			// last decrease is draining the queue. Cutting again now
			// would undershoot, since a queue drains long after the
			// rate that built it is gone. Better means strictly: a
			// latency that stays high is no improvement, and holding on
			// it would hold for good. The quantile comes from buckets
			// about 3 % wide, in which a slowly draining queue reads
			// flat, so an equal quantile is judged by the exact mean.
			return rate, ReasonHold, true
		}
		return rate * c.backoff, ReasonLatency, true
	case gradientLaw:
		if s.ok == 0 {
			return rate, ReasonHold, false
		}
		short := float64(s.sum) / float64(s.ok)
		short = max(short, 1) // a latency of 0 ns would divide by zero
		long := st.remember(short, c.longWindow)
		prev := st.prev
		st.prev = short
		g := min(max(c.tolerance*long/short, 0.5), 1)
		if g < 1 && short < prev {
			// Too slow but improving: wait for the queue to drain (see
			// the AIMD case above).
			return rate, ReasonHold, true
		}
		// The probe shrinks as latency rises through the tolerated band,
		// from all of it at the long-term latency to none at the band's
		// top: a rate limit above capacity builds its queue slowly, and a
		// full probe all the way to the top overshot capacity by 15 %.
		headroom := 1.0
		if short > long {
			headroom = 0
			if c.tolerance > 1 {
				headroom = max((c.tolerance*long-short)/((c.tolerance-1)*long), 0)
			}
		}
		target := rate*g + headroom*c.growth*math.Sqrt(rate)
		next := rate + c.smoothing*(target-rate)
		if next < rate {
			return next, ReasonLatency, true
		}
		return next, ReasonHealthy, true
	}
	return rate, ReasonHold, false
}
