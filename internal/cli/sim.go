package cli

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"iter"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/stores/memstore"
)

// Bounds that keep a mistyped flag from running for hours or filling
// memory. All are far beyond what a readable table or chart needs.
const (
	maxIntervals = 100_000
	maxRequests  = 10_000_000
	maxOffset    = 100 * 365 * 24 * time.Hour // a trace's longest offset
)

// simKey is the one key the simulation charges.
const simKey = "sim"

// The defaults reproduce the worked example of docs/sim.md.
const (
	defaultAlgorithm = "token-bucket"
	defaultLimit     = "10/s burst 50"
	defaultTraffic   = "burst:60/1s"
	defaultDuration  = "5s"
	defaultInterval  = "1s"
	defaultCost      = "1"
	defaultStart     = "2030-01-01T00:00:00Z"
)

// simConfig is a parsed and validated sim command line.
type simConfig struct {
	algs        []core.Algorithm // one or more, in the order named
	limit       core.Limit
	traffic     pattern
	trafficSpec string            // the -traffic value
	duration    time.Duration     // whole microseconds, ≥ interval
	interval    time.Duration     // whole microseconds, > 0
	cost        int64             // of each generated request, ≥ 0
	chart       string            // "" or a path ending in .svg
	start       time.Time         // whole microseconds
	down        *downstreamConfig // nil: no downstream model
	adapt       *adaptConfig      // nil: the limit is fixed; set only with down
	shape       *shapeConfig      // nil: each request is admitted or rejected at once
}

// shapeConfig is a parsed -queue and -max-delay: shaping mode, in which
// each request reserves its turn and waits in line for it.
type shapeConfig struct {
	queue    int64         // tokens in line per key, 1 to 2^52; 0: no bound but maxDelay
	maxDelay time.Duration // the longest wait, whole µs; 0: no bound but queue
}

// maxWait returns the MaxWait of each reservation: -max-delay, or without
// it the longest a Duration holds, as core's Wait uses without a
// deadline, which leaves the queue the only bound.
func (s *shapeConfig) maxWait() time.Duration {
	if s.maxDelay > 0 {
		return s.maxDelay
	}
	return time.Duration(math.MaxInt64)
}

// String describes the bounds as the table's header does: "a queue of 20
// tokens and a wait of at most 2s".
func (s *shapeConfig) String() string {
	var parts []string
	if s.queue > 0 {
		parts = append(parts, fmt.Sprintf("a queue of %d tokens", s.queue))
	}
	if s.maxDelay > 0 {
		parts = append(parts, "a wait of at most "+duration(s.maxDelay))
	}
	return strings.Join(parts, " and ")
}

// errHelp reports that -h was asked for; it is not a failure.
var errHelp = errors.New("help requested")

func runSim(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseSim(args, stdout)
	switch {
	case errors.Is(err, errHelp):
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "sluice sim: %v\n", err)
		return 2
	}
	results, err := simulateAll(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "sluice sim: %v\n", err)
		return 1
	}
	// Every run sends the same requests, so the first says for all how
	// many a trace had beyond the duration.
	if n := results[0].ignored; n > 0 {
		fmt.Fprintf(stderr, "sluice sim: %d trace requests at or after -duration %s were not sent\n", n, duration(cfg.duration))
	}
	if len(results) == 1 {
		writeTable(stdout, cfg, results[0])
	} else {
		writeComparison(stdout, cfg, results)
	}
	if cfg.chart != "" {
		if err := saveChart(cfg.chart, cfg, results); err != nil {
			fmt.Fprintf(stderr, "sluice sim: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "chart written to %s\n", cfg.chart)
	}
	return 0
}

func simUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, `Usage: sluice sim [flags]

Sim runs a traffic pattern through one algorithm on the in-memory store,
on a virtual clock and for one key, and prints what was sent, admitted and
rejected in each interval, the capacity left at each interval's end, and a
summary. With -algorithm all, or a comma list of names, it runs each
algorithm on the same traffic and limit and prints one table comparing
what each admitted. With no flags it runs the worked example of
docs/sim.md.

Traffic patterns:
  constant:RATE          evenly spaced requests, the first at 0 (constant:60/s)
  burst:N/PERIOD         N requests at once at the start of every PERIOD (burst:60/1s)
  onoff:RATE,ON,OFF      RATE for ON, then silent for OFF, repeating (onoff:60/s,2s,3s)
  trace:FILE             one request per line: an offset from the start as a Go
                         duration (1.5s) or seconds (1.5), then an optional cost;
                         blank lines and # comments are ignored

A RATE is N/s, N/min, N/h, N/day or N/<Go duration>, such as 5/250ms. A
limit is a RATE, then optionally "burst N": 10/s burst 50, 100/min, 1/250ms.

With -downstream, the admitted requests go to a model of the service
behind the limiter: a queue served at the capacity, whose latency is flat
below it and grows with the queue beyond it. The table gains the capacity
and the mean latency of the requests admitted. With -adapt as well, an
adaptive controller (package adaptive) sets the limit from the latencies
the downstream reports, and the table and chart show the adapted limit
against the capacity:

  sim -traffic constant:400/s -downstream 200/s -capacity-change 30s:100/s -adapt gradient -duration 60s

With -queue or -max-delay, the limiter shapes the traffic rather than
cutting it (the token bucket and GCRA only): each request reserves its
turn and waits in line for it, or is refused at once if the line is full
or its wait too long. With a burst of 1 the requests leave the line one at a
time, at the limit's rate. The table gains what left the line in each
interval and the line's length at its end:

  sim -algorithm gcra -limit 10/s -burst 1 -traffic burst:30/2s -queue 20 -duration 12s

Flags:
`)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// parseSim parses and checks a sim command line. Every error it returns is
// a usage error, one line naming the flag at fault.
func parseSim(args []string, stdout io.Writer) (*simConfig, error) {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	// The flags are parsed here rather than by the flag package, so that
	// errors name the flag and say what is wrong with the value.
	var (
		algName  = textFlag(fs, "algorithm", defaultAlgorithm, "the algorithm `name`: token-bucket, gcra, fixed-window,\nsliding-window-counter or sliding-window-log; a comma list of them\nto compare them; or all, the five of them")
		limitArg = textFlag(fs, "limit", defaultLimit, "the `limit`: N/PERIOD, then optionally burst N (the burst defaults to N);\nPERIOD is s, min, h, day or a Go duration: 10/s burst 50, 100/min, 1/250ms;\nunder -adapt, the initial limit")
		burstArg = textFlag(fs, "burst", "", "the burst `N`, the most the token bucket and GCRA admit at once, in place of\nthe -limit's; 0 means the rate (the window algorithms ignore the burst)")
		traffic  = textFlag(fs, "traffic", defaultTraffic, "the traffic `pattern` (see above)")
		durArg   = textFlag(fs, "duration", defaultDuration, "how long to simulate, a Go `duration`; a trace's default is its own length")
		ivlArg   = textFlag(fs, "interval", defaultInterval, "the `duration` of one table row and one chart bar")
		costArg  = textFlag(fs, "cost", defaultCost, "the cost `N` ≥ 0 of each request (a trace line's second column overrides it)")
		chart    = textFlag(fs, "chart", "", "also write an SVG chart of the intervals to `FILE.svg`; with several\nalgorithms, one line each of what they admitted")
		startArg = textFlag(fs, "start", defaultStart, "the virtual start `time`, RFC 3339")
		downArg  = textFlag(fs, "downstream", "", "model the service behind the limiter, of capacity `RATE` (200/s): its latency\nis flat below the capacity and grows with its queue beyond it")
		latArg   = textFlag(fs, "downstream-latency", defaultDownstreamLatency, "the downstream's latency at rest, a Go `duration`")
		adaptArg = textFlag(fs, "adapt", "", "adapt the limit to the downstream's latency by the `law` aimd or gradient,\nstarting from -limit (default "+defaultAdaptLimit+"); needs -downstream")
		aivlArg  = textFlag(fs, "adapt-interval", defaultAdaptInterval, "how often the adaptive controller updates the limit, a Go `duration`\nfrom 1ms to 1h")
		thrArg   = textFlag(fs, "adapt-threshold", "", "the `latency` above which the AIMD law backs off, at the 99th percentile\n(default twice -downstream-latency)")
		incArg   = textFlag(fs, "adapt-increase", "", "what the AIMD law adds to the limit in a healthy update, `N` requests\nper the limit's period (default a tenth of the initial rate)")
		growArg  = textFlag(fs, "adapt-growth", defaultAdaptGrowth, "the gradient law's growth `K`: a healthy update moves the limit towards\nlimit + K·√limit")
		queueArg = textFlag(fs, "queue", "", "shape the traffic: each request reserves its turn and waits in line, at most\n`N` tokens of them per key, the rest refused at once (token-bucket and gcra)")
		delayArg = textFlag(fs, "max-delay", "", "shape the traffic: each request reserves its turn and waits in line at most\nthis Go `duration`, or is refused at once (token-bucket and gcra)")
		changes  list
	)
	fs.Var(&changes, "capacity-change", "change the downstream's capacity at an instant: `AT:RATE`, such as 30s:100/s;\na comma list, or the flag repeated, for several")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			simUsage(stdout, fs)
			return nil, errHelp
		}
		return nil, fmt.Errorf("%v (see sluice sim -h)", err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q: sim takes only flags (see sluice sim -h)", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	cfg := &simConfig{chart: *chart}
	var err error
	if cfg.algs, err = parseAlgorithms(*algName); err != nil {
		return nil, fmt.Errorf("-algorithm %q: %v", *algName, err)
	}
	if set["adapt"] && !set["limit"] {
		*limitArg = defaultAdaptLimit
	}

	// The text form of core.Limit, whose errors quote the value and name
	// the part at fault.
	limit, err := core.ParseLimit(*limitArg)
	switch {
	case err != nil:
		return nil, fmt.Errorf("-limit: %w", err)
	case limit.IsInf():
		return nil, fmt.Errorf("-limit %s: sim simulates a finite limit, such as 10/s", *limitArg)
	}
	cfg.limit = limit
	if set["burst"] {
		burst, err := strconv.ParseInt(*burstArg, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("-burst %q: not a whole number", *burstArg)
		}
		if burst == 0 {
			burst = limit.Rate()
		}
		cfg.limit = limit.WithBurst(burst)
		if err := cfg.limit.Validate(); err != nil {
			return nil, fmt.Errorf("-limit %s -burst %s: %w", *limitArg, *burstArg, err)
		}
	}
	for _, alg := range cfg.algs {
		if err := alg.Validate(cfg.limit); err != nil {
			return nil, fmt.Errorf("-limit %s with -algorithm %s: %w", *limitArg, alg.Name(), err)
		}
	}

	if cfg.interval, err = parseDuration(*ivlArg); err != nil {
		return nil, fmt.Errorf("-interval %q: %v", *ivlArg, err)
	}
	if cfg.duration, err = parseDuration(*durArg); err != nil {
		return nil, fmt.Errorf("-duration %q: %v", *durArg, err)
	}
	if cfg.cost, err = strconv.ParseInt(*costArg, 10, 64); err != nil || cfg.cost < 0 {
		return nil, fmt.Errorf("-cost %q: not a whole number of at least 0", *costArg)
	}
	cfg.trafficSpec = *traffic
	if cfg.traffic, err = parsePattern(*traffic); err != nil {
		return nil, fmt.Errorf("-traffic %q: %v", *traffic, err)
	}
	if tr, ok := cfg.traffic.(*tracePattern); ok && !set["duration"] {
		// A trace runs to the end of the interval holding its last
		// request, unless told otherwise.
		last := time.Duration(tr.reqs[len(tr.reqs)-1].at) * time.Microsecond
		cfg.duration = (last/cfg.interval + 1) * cfg.interval
	}
	if cfg.interval > cfg.duration {
		return nil, fmt.Errorf("-interval %v is longer than -duration %v", cfg.interval, cfg.duration)
	}
	if n := (cfg.duration + cfg.interval - 1) / cfg.interval; n > maxIntervals {
		return nil, fmt.Errorf("-duration %v in intervals of %v makes %d intervals, more than %d; use a longer -interval", cfg.duration, cfg.interval, n, maxIntervals)
	}

	if n := cfg.traffic.count(cfg.duration.Microseconds()); n > maxRequests {
		return nil, fmt.Errorf("-traffic %s sends %s requests in %s, more than %d; lower its rate or shorten -duration", *traffic, countName(n), duration(cfg.duration), maxRequests)
	}

	if cfg.start, err = time.Parse(time.RFC3339Nano, *startArg); err != nil {
		return nil, fmt.Errorf("-start %q: not an RFC 3339 instant such as %s", *startArg, defaultStart)
	}
	cfg.start = cfg.start.Truncate(time.Microsecond)
	last := time.UnixMicro(core.MaxUnits - 1).UTC()
	switch {
	case cfg.start.Before(time.Unix(0, 0)):
		return nil, fmt.Errorf("-start %s is before the Unix epoch", *startArg)
	case cfg.start.Add(cfg.duration).After(last):
		return nil, fmt.Errorf("-start %s plus -duration %v ends after %s, the last instant sluice counts exactly", *startArg, cfg.duration, last.Format(time.RFC3339))
	}

	if cfg.chart != "" && !strings.EqualFold(filepath.Ext(cfg.chart), ".svg") {
		return nil, fmt.Errorf("-chart %q: sim writes SVG charts only; name the file something.svg", cfg.chart)
	}
	law := lawArgs{name: *adaptArg, interval: *aivlArg, threshold: *thrArg, increase: *incArg, growth: *growArg}
	if err := parseDownstream(cfg, set, *downArg, *latArg, changes, law); err != nil {
		return nil, err
	}
	if err := parseShaping(cfg, set, *queueArg, *delayArg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// parseShaping parses the flags of shaping mode, -queue and -max-delay,
// into cfg, whose other flags are parsed. set holds the flags given.
func parseShaping(cfg *simConfig, set map[string]bool, queue, maxDelay string) error {
	name := ""
	switch {
	case set["queue"]:
		name = "queue"
	case set["max-delay"]:
		name = "max-delay"
	default:
		return nil
	}
	switch alg := cfg.algs[0]; {
	case len(cfg.algs) != 1:
		return fmt.Errorf("-%s shapes the traffic of one limiter; -algorithm names %d algorithms", name, len(cfg.algs))
	case !core.Reserves(alg):
		return fmt.Errorf("-%s shapes traffic with reservations, which %s cannot make; use %s", name, alg.Name(), reserverNames())
	case cfg.down != nil:
		// The downstream model takes each request as it is admitted;
		// behind a line it would have to take it at its release.
		return fmt.Errorf("-%s and -downstream: sim models a downstream behind a limiter that admits at once, not behind a line", name)
	}
	shape := &shapeConfig{}
	if set["queue"] {
		n, err := strconv.ParseInt(queue, 10, 64)
		if err != nil || n < 1 || n > core.MaxUnits {
			return fmt.Errorf("-queue %q: want a whole number of tokens from 1 to 2^52", queue)
		}
		shape.queue = n
	}
	if set["max-delay"] {
		d, err := parseDuration(maxDelay)
		if err != nil {
			return fmt.Errorf("-max-delay %q: %v", maxDelay, err)
		}
		shape.maxDelay = d
	}
	cfg.shape = shape
	return nil
}

// reserverNames lists the algorithms that can reserve, and so shape:
// "token-bucket or gcra".
func reserverNames() string {
	var names []string
	for _, alg := range append(algorithms.All(), algorithms.Concurrency) {
		if core.Reserves(alg) {
			names = append(names, alg.Name())
		}
	}
	if len(names) == 1 {
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// lawArgs are the values of -adapt and the flags of its laws, as given.
type lawArgs struct {
	name, interval, threshold, increase, growth string
}

// parseDownstream parses the flags of the downstream model and of
// adaptive mode into cfg, whose other flags are parsed. set holds the
// flags given.
func parseDownstream(cfg *simConfig, set map[string]bool, capacity, latency string, changes []string, law lawArgs) error {
	adaptFlags := []string{"adapt-interval", "adapt-threshold", "adapt-increase", "adapt-growth"}
	if !set["downstream"] {
		for _, name := range append([]string{"downstream-latency", "capacity-change", "adapt"}, adaptFlags...) {
			if set[name] {
				return fmt.Errorf("-%s needs -downstream, the capacity of the service behind the limiter", name)
			}
		}
		return nil
	}
	if len(cfg.algs) != 1 {
		return fmt.Errorf("-downstream models the service behind one limiter; -algorithm names %d algorithms", len(cfg.algs))
	}
	first, err := parseCapacity(capacity)
	if err != nil {
		return fmt.Errorf("-downstream %q: %v", capacity, err)
	}
	down := &downstreamConfig{steps: []capacityStep{first}}
	if down.base, err = parseDuration(latency); err != nil {
		return fmt.Errorf("-downstream-latency %q: %v", latency, err)
	}
	later, err := parseCapacityChanges(changes, cfg.duration)
	if err != nil {
		return fmt.Errorf("-capacity-change %v", err)
	}
	down.steps = append(down.steps, later...)
	cfg.down = down

	if !set["adapt"] {
		for _, name := range adaptFlags {
			if set[name] {
				return fmt.Errorf("-%s needs -adapt, the law that adapts the limit", name)
			}
		}
		return nil
	}
	alg := cfg.algs[0]
	if alg.Name() == algorithms.Concurrency.Name() {
		return fmt.Errorf("-adapt adapts a rate, and %s limits leases held; choose a rate algorithm", alg.Name())
	}
	for _, name := range adaptFlags {
		if l, ok := lawFlags[name]; ok && set[name] && l != law.name && (law.name == lawAIMD || law.name == lawGradient) {
			return fmt.Errorf("-%s sets a parameter of the %s law, not of -adapt %s", name, l, law.name)
		}
	}
	ivl, err := parseDuration(law.interval)
	if err != nil {
		return fmt.Errorf("-adapt-interval %q: %v", law.interval, err)
	}
	var params lawParams
	if set["adapt-threshold"] {
		if params.threshold, err = parseDuration(law.threshold); err != nil {
			return fmt.Errorf("-adapt-threshold %q: %v", law.threshold, err)
		}
	}
	if set["adapt-increase"] {
		if params.increase, err = parsePositive(law.increase); err != nil {
			return fmt.Errorf("-adapt-increase %q: %v", law.increase, err)
		}
	}
	if params.growth, err = parsePositive(law.growth); err != nil {
		return fmt.Errorf("-adapt-growth %q: %v", law.growth, err)
	}
	cfg.adapt, err = newAdaptConfig(law.name, ivl, params, down.base, cfg.limit, alg)
	return err
}

// parsePositive parses a positive, finite decimal number.
func parsePositive(s string) (float64, error) {
	f, err := strconv.ParseFloat(s, 64)
	switch {
	case err != nil:
		return 0, errors.New("not a number such as 1.5")
	case !(f > 0) || math.IsInf(f, 0):
		return 0, errors.New("must be a positive number")
	}
	return f, nil
}

// list is a flag that may be given more than once; it keeps every value,
// in order.
type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

// allAlgorithms is the -algorithm value that names every rate-limiting
// algorithm.
const allAlgorithms = "all"

// parseAlgorithms parses an -algorithm value: one name, a comma list of
// names, or "all", which is [algorithms.All]. Concurrency limits leases
// held rather than a rate, so "all" leaves it out; it is run only when
// named.
func parseAlgorithms(s string) ([]core.Algorithm, error) {
	if s == allAlgorithms {
		return algorithms.All(), nil
	}
	var algs []core.Algorithm
	for name := range strings.SplitSeq(s, ",") {
		name = strings.TrimSpace(name)
		switch {
		case name == "":
			return nil, errors.New("empty name; want all, or names separated by commas, such as token-bucket,gcra")
		case name == allAlgorithms:
			return nil, errors.New("all names every algorithm and stands alone, not in a list")
		}
		alg, err := algorithms.ByName(name)
		if err != nil {
			return nil, fmt.Errorf("unknown algorithm %q; want all, or one or more of %s, separated by commas", name, algorithmNames())
		}
		if slices.ContainsFunc(algs, func(a core.Algorithm) bool { return a.Name() == alg.Name() }) {
			return nil, fmt.Errorf("%s is named twice", name)
		}
		algs = append(algs, alg)
	}
	return algs, nil
}

// algorithmNames lists the names -algorithm accepts besides "all".
func algorithmNames() string {
	var names []string
	for _, alg := range append(algorithms.All(), algorithms.Concurrency) {
		names = append(names, alg.Name())
	}
	return strings.Join(names, ", ")
}

// textFlag defines a flag whose value is parsed after the command line is,
// and which -h prints unquoted: (default 10/s), not (default "10/s").
func textFlag(fs *flag.FlagSet, name, value, usage string) *string {
	p := new(string)
	*p = value
	fs.Var((*text)(p), name, usage)
	return p
}

type text string

func (t *text) String() string     { return string(*t) }
func (t *text) Set(v string) error { *t = text(v); return nil }

// parseRate parses "N/PERIOD": N/s, N/min, N/h, N/day or N/<Go duration>.
// It checks the syntax only; the caller judges the numbers.
func parseRate(s string) (int64, time.Duration, error) {
	num, per, ok := strings.Cut(s, "/")
	if !ok {
		return 0, 0, errors.New("want N/PERIOD, such as 10/s, 600/min or 5/250ms")
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("count %q is not a whole number", num)
	}
	var period time.Duration
	switch per {
	case "s":
		period = time.Second
	case "min":
		period = time.Minute
	case "h":
		period = time.Hour
	case "day":
		period = 24 * time.Hour
	default:
		period, err = time.ParseDuration(per)
		if err != nil {
			return 0, 0, fmt.Errorf("period %q is not s, min, h, day or a Go duration such as 250ms", per)
		}
	}
	return n, period, nil
}

// parseDuration parses a positive Go duration in whole microseconds, the
// resolution of sluice's clock.
func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return 0, errors.New("not a Go duration such as 5s or 100ms")
	case d <= 0:
		return 0, errors.New("must be positive")
	case d%time.Microsecond != 0:
		return 0, errors.New("must be a whole number of microseconds")
	}
	return d, nil
}

// A pattern generates a simulation's requests.
type pattern interface {
	// arrivals yields the offset in microseconds from the start and the
	// cost of every request before end, in time order. cost is the cost
	// of a request that does not carry its own.
	arrivals(end, cost int64) iter.Seq2[int64, int64]
	// count returns how many requests arrivals yields before end,
	// saturating at math.MaxUint64.
	count(end int64) uint64
}

// parsePattern parses a -traffic value.
func parsePattern(s string) (pattern, error) {
	kind, arg, ok := strings.Cut(s, ":")
	if !ok {
		return nil, errors.New("want constant:RATE, burst:N/PERIOD, onoff:RATE,ON,OFF or trace:FILE")
	}
	switch kind {
	case "constant":
		n, p, err := parseTrafficRate(arg)
		if err != nil {
			return nil, err
		}
		return constantPattern{n, p}, nil
	case "burst":
		n, p, err := parseTrafficRate(arg)
		if err != nil {
			return nil, err
		}
		return burstPattern{n, p}, nil
	case "onoff":
		parts := strings.Split(arg, ",")
		if len(parts) != 3 {
			return nil, errors.New("want onoff:RATE,ON,OFF, such as onoff:60/s,2s,3s")
		}
		n, p, err := parseTrafficRate(parts[0])
		if err != nil {
			return nil, err
		}
		on, err := parseDuration(parts[1])
		if err != nil {
			return nil, fmt.Errorf("ON %q: %v", parts[1], err)
		}
		off, err := parseDuration(parts[2])
		if err != nil {
			return nil, fmt.Errorf("OFF %q: %v", parts[2], err)
		}
		return onoffPattern{n, p, on.Microseconds(), off.Microseconds()}, nil
	case "trace":
		if arg == "" {
			return nil, errors.New("want trace:FILE")
		}
		return readTrace(arg)
	}
	return nil, fmt.Errorf("unknown pattern %q: want constant, burst, onoff or trace", kind)
}

// parseTrafficRate parses a pattern's N/PERIOD, returning the period in
// microseconds.
func parseTrafficRate(s string) (n, period int64, err error) {
	n, d, err := parseRate(s)
	switch {
	case err != nil:
		return 0, 0, fmt.Errorf("rate %q: %v", s, err)
	case n < 1 || n > core.MaxUnits:
		return 0, 0, fmt.Errorf("rate %q: count must be between 1 and 2^52", s)
	case d <= 0 || d%time.Microsecond != 0:
		return 0, 0, fmt.Errorf("rate %q: period must be a positive whole number of microseconds", s)
	}
	return n, d.Microseconds(), nil
}

// evenly yields n requests per period µs at from + ⌊i × period / n⌋ for
// i = 0, 1, ... while they fall before until. It steps by the quotient and
// carries the remainder, so the spacing is exact however long it runs and
// whatever n is. It reports whether yield asked for more.
func evenly(from, until, n, period, cost int64, yield func(int64, int64) bool) bool {
	q, r := period/n, period%n
	at, rem := from, int64(0)
	for at < until {
		if !yield(at, cost) {
			return false
		}
		at += q
		if rem += r; rem >= n {
			at, rem = at+1, rem-n
		}
	}
	return true
}

// countEvenly returns how many of n requests per period µs, evenly spaced
// from 0, fall before span µs: the i with ⌊i × period / n⌋ < span, which
// is ⌈span × n / period⌉. It saturates at math.MaxUint64.
func countEvenly(span, n, period int64) uint64 {
	if span <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(span), uint64(n))
	if hi >= uint64(period) {
		return math.MaxUint64
	}
	q, r := bits.Div64(hi, lo, uint64(period))
	if r != 0 {
		q++ // cannot wrap: q < span × n / period + 1 ≤ 2^64 / period
	}
	return q
}

// mulSat returns a × b, saturating at math.MaxUint64.
func mulSat(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi != 0 {
		return math.MaxUint64
	}
	return lo
}

// addSat returns a + b, saturating at math.MaxUint64.
func addSat(a, b uint64) uint64 {
	sum, carry := bits.Add64(a, b, 0)
	if carry != 0 {
		return math.MaxUint64
	}
	return sum
}

// constantPattern is n evenly spaced requests every period µs.
type constantPattern struct{ n, period int64 }

func (p constantPattern) arrivals(end, cost int64) iter.Seq2[int64, int64] {
	return func(yield func(int64, int64) bool) { evenly(0, end, p.n, p.period, cost, yield) }
}

func (p constantPattern) count(end int64) uint64 { return countEvenly(end, p.n, p.period) }

// burstPattern is n requests at once at the start of every period µs.
type burstPattern struct{ n, period int64 }

func (p burstPattern) arrivals(end, cost int64) iter.Seq2[int64, int64] {
	return func(yield func(int64, int64) bool) {
		for at := int64(0); at < end; at += p.period {
			for range p.n {
				if !yield(at, cost) {
					return
				}
			}
		}
	}
}

func (p burstPattern) count(end int64) uint64 {
	return mulSat(uint64(core.CeilDiv(end, p.period)), uint64(p.n))
}

// onoffPattern is n requests every period µs, evenly spaced, for on µs;
// then none for off µs; and again.
type onoffPattern struct{ n, period, on, off int64 }

func (p onoffPattern) arrivals(end, cost int64) iter.Seq2[int64, int64] {
	return func(yield func(int64, int64) bool) {
		for at := int64(0); at < end; at += p.on + p.off {
			if !evenly(at, min(at+p.on, end), p.n, p.period, cost, yield) {
				return
			}
		}
	}
}

func (p onoffPattern) count(end int64) uint64 {
	cycle := p.on + p.off
	full := uint64(end / cycle)
	return addSat(mulSat(full, countEvenly(p.on, p.n, p.period)), countEvenly(min(end%cycle, p.on), p.n, p.period))
}

// tracePattern replays requests read from a file, sorted by offset.
type tracePattern struct {
	reqs []traced
}

type traced struct {
	at   int64 // µs from the start
	cost int64 // -1: the -cost flag's
}

func (p *tracePattern) arrivals(end, cost int64) iter.Seq2[int64, int64] {
	return func(yield func(int64, int64) bool) {
		for _, r := range p.reqs {
			if r.at >= end {
				return
			}
			c := r.cost
			if c < 0 {
				c = cost
			}
			if !yield(r.at, c) {
				return
			}
		}
	}
}

func (p *tracePattern) count(end int64) uint64 { return uint64(len(p.reqs) - p.beyond(end)) }

// beyond returns the number of requests at or after end µs.
func (p *tracePattern) beyond(end int64) int {
	i, _ := slices.BinarySearchFunc(p.reqs, end, func(r traced, end int64) int {
		if r.at < end {
			return -1
		}
		return 1
	})
	return len(p.reqs) - i
}

// readTrace reads a trace file: one request per line, an offset and an
// optional cost separated by spaces, tabs or a comma. Offsets are
// truncated to whole microseconds.
func readTrace(path string) (*tracePattern, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var p tracePattern
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.FieldsFunc(text, func(r rune) bool { return unicode.IsSpace(r) || r == ',' })
		if len(fields) == 0 {
			continue
		}
		if len(fields) > 2 {
			return nil, fmt.Errorf("%s:%d: want an offset and an optional cost, found %d columns", path, line, len(fields))
		}
		at, err := parseOffset(fields[0])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", path, line, err)
		}
		cost := int64(-1)
		if len(fields) == 2 {
			if cost, err = strconv.ParseInt(fields[1], 10, 64); err != nil || cost < 0 {
				return nil, fmt.Errorf("%s:%d: cost %q is not a whole number of at least 0", path, line, fields[1])
			}
		}
		p.reqs = append(p.reqs, traced{at, cost})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if len(p.reqs) == 0 {
		return nil, fmt.Errorf("%s: no requests in the trace", path)
	}
	slices.SortStableFunc(p.reqs, func(a, b traced) int { return int(min(max(a.at-b.at, -1), 1)) })
	return &p, nil
}

// parseOffset parses a trace offset, a Go duration or plain seconds, into
// microseconds.
func parseOffset(s string) (int64, error) {
	d, err := time.ParseDuration(s)
	if err != nil && strings.Trim(s, "+-.0123456789") == "" {
		// Plain seconds: ParseDuration reads decimals exactly, which
		// ParseFloat would not.
		d, err = time.ParseDuration(s + "s")
	}
	switch {
	case err != nil:
		return 0, fmt.Errorf("offset %q is not a duration (1.5s) or seconds (1.5)", s)
	case d < 0:
		return 0, fmt.Errorf("offset %q is negative", s)
	case d > maxOffset:
		return 0, fmt.Errorf("offset %q is beyond %v", s, maxOffset)
	}
	return d.Microseconds(), nil
}

// interval is one row of the table and one bar of the chart.
type interval struct {
	start, end time.Duration // offsets from the simulation's start
	sent       int64         // requests
	admitted   int64
	rejected   int64
	level      int64 // Decision.Remaining of a zero-cost peek at end
	// With a downstream model:
	limit    float64 // the limit's rate a second at end, before an update then
	capacity float64 // the downstream's capacity a second just before end
	served   int64   // requests admitted to the downstream
	latency  float64 // their latencies' sum, ns, which an int64 could overflow
	// In shaping mode:
	released int64 // requests whose turn came in the interval: they left the line
	line     int64 // requests admitted and still waiting at end
}

// meanLatency returns the mean latency of the requests the interval
// admitted to the downstream, or 0 if none.
func (iv interval) meanLatency() time.Duration {
	if iv.served == 0 {
		return 0
	}
	return time.Duration(iv.latency / float64(iv.served))
}

// limitPoint is the limit's rate a second from an offset on.
type limitPoint struct {
	at   time.Duration // from the simulation's start
	rate float64
}

// simResult is what a simulation produced.
type simResult struct {
	alg          core.Algorithm
	intervals    []interval
	capacity     int64 // Decision.Limit: the burst, or the rate for window algorithms
	startLevel   int64 // the level at the start, before any request
	costs        bool  // some request cost other than 1
	admittedCost int64
	ignored      int // trace requests at or after the duration
	// limits is the limit over the run, at the start and at each change:
	// with a downstream model only. Under -adapt it changes with every
	// update that moves it.
	limits []limitPoint
	// In shaping mode, the releases before the run's end: how many, the
	// smallest and largest gap between consecutive ones (with two or
	// more), the most requests in line at once, and how many were still
	// in line at the end.
	releases       int64
	minGap, maxGap time.Duration
	maxLine        int64
	inLine         int64
}

// limitAt returns the limit's rate a second just before off, the one that
// decided the requests then: at 0, the initial limit.
func (r *simResult) limitAt(off time.Duration) float64 {
	i, _ := slices.BinarySearchFunc(r.limits, off, func(p limitPoint, off time.Duration) int {
		if p.at < off {
			return -1
		}
		return 1
	})
	return r.limits[max(i-1, 0)].rate
}

func (r *simResult) totals() (sent, admitted, rejected int64) {
	for _, iv := range r.intervals {
		sent += iv.sent
		admitted += iv.admitted
		rejected += iv.rejected
	}
	return sent, admitted, rejected
}

// simulateAll runs cfg's traffic through each of its algorithms in turn,
// each on a store of its own, and returns the results in the same order.
func simulateAll(cfg *simConfig) ([]*simResult, error) {
	results := make([]*simResult, len(cfg.algs))
	for i, alg := range cfg.algs {
		res, err := simulate(cfg, alg)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", alg.Name(), err)
		}
		results[i] = res
	}
	return results, nil
}

// simulate runs cfg's traffic through a limiter of alg on a memory store
// whose clock is the simulation's virtual clock. With a downstream model,
// the admitted requests are sent to it; with -adapt, an adaptive
// controller sets the limit from their latencies, reported as they
// complete, and updates once a control interval of the same clock.
func simulate(cfg *simConfig, alg core.Algorithm) (*simResult, error) {
	var now time.Time // the virtual clock
	store, err := memstore.New(memstore.Config{Now: func() time.Time { return now }, SweepInterval: -1})
	if err != nil {
		return nil, err
	}
	defer store.Close()
	// Under -adapt, decisions go through a policy that decides each
	// request under the controller's limit, as package adaptive is used.
	var st core.Store = store
	var ctrl *adaptive.Controller
	if cfg.adapt != nil {
		if ctrl, err = cfg.adapt.newController(cfg.limit); err != nil {
			return nil, err
		}
		defer ctrl.Close()
		p, err := policy.New(store, policy.WithOverride(ctrl.Override))
		if err != nil {
			return nil, err
		}
		st = p
	}
	lim, err := sluice.NewLimiter(st, alg, cfg.limit)
	if err != nil {
		return nil, err
	}
	if cfg.shape != nil && cfg.shape.queue > 0 {
		if lim, err = lim.WithQueue(cfg.shape.queue); err != nil {
			return nil, err
		}
	}
	limit := func() core.Limit {
		if ctrl != nil {
			return ctrl.Limit()
		}
		return cfg.limit
	}
	ctx := context.Background()

	n := int((cfg.duration + cfg.interval - 1) / cfg.interval)
	res := &simResult{alg: alg, intervals: make([]interval, n)}
	for i := range res.intervals {
		iv := &res.intervals[i]
		iv.start = time.Duration(i) * cfg.interval
		iv.end = min(iv.start+cfg.interval, cfg.duration)
	}
	// closeInterval records the level at the current interval's end,
	// before any request at that instant, and moves on to the next.
	// A zero-cost peek reports the capacity left at an instant without
	// charging anything.
	level := func(off time.Duration) (core.Decision, error) {
		d, err := st.Apply(ctx, core.Request{
			Key:   simKey,
			Cost:  0,
			Op:    core.OpPeek,
			Terms: &core.Terms{Algorithm: alg, Limit: cfg.limit, Now: cfg.start.Add(off)},
		})
		if err != nil {
			return d, fmt.Errorf("peek at %v: %w", off, err)
		}
		return d, nil
	}
	d, err := level(0)
	if err != nil {
		return nil, err
	}
	res.startLevel, res.capacity = d.Remaining, d.Limit
	var down *downstream
	if cfg.down != nil {
		down = &downstream{cfg: cfg.down}
		res.limits = []limitPoint{{0, perSecond(limit())}}
	}
	cur := 0
	// In shaping mode, the instants (µs from the start) at which the
	// requests in line may act, in order: each leaves the line then.
	var line []int64
	var lastRelease int64
	// release counts a request leaving the line at t µs, in the current
	// interval; releases come in time order.
	release := func(t int64) {
		res.intervals[cur].released++
		if res.releases > 0 {
			gap := time.Duration(t-lastRelease) * time.Microsecond
			if res.releases == 1 || gap < res.minGap {
				res.minGap = gap
			}
			res.maxGap = max(res.maxGap, gap)
		}
		res.releases++
		lastRelease = t
	}
	closeInterval := func() error {
		iv := &res.intervals[cur]
		d, err := level(iv.end)
		if err != nil {
			return err
		}
		iv.level = d.Remaining
		iv.line = int64(len(line))
		if down != nil {
			iv.limit = perSecond(limit())
			iv.capacity = cfg.down.capacityAt(iv.end.Microseconds() - 1)
		}
		cur++
		return nil
	}

	// The requests in the downstream, in the order they complete: its
	// queue is served first in, first out.
	type call struct {
		end     int64 // µs from the start
		latency time.Duration
	}
	var calls []call
	nextUpdate := int64(math.MaxInt64) // µs from the start
	if ctrl != nil {
		nextUpdate = cfg.adapt.interval.Microseconds()
	}
	// catchUp runs in time order what happens before a request at off µs,
	// and at off itself: the downstream's calls that complete are
	// reported to the controller, intervals that end close, and the
	// controller updates. At one instant it reports first, so that an
	// update sees the calls that ended then, and closes an interval
	// before the update, so that the interval shows the limit that
	// decided its requests.
	catchUp := func(off int64) error {
		for cur < len(res.intervals) {
			end := res.intervals[cur].end.Microseconds()
			switch {
			case len(line) > 0 && line[0] < end && line[0] <= off:
				// A request whose turn comes before the interval ends,
				// and no later than off: before a request at off, so
				// that it finds the line without it.
				release(line[0])
				line = line[1:]
			case len(calls) > 0 && calls[0].end <= min(off, end, nextUpdate):
				if err := ctrl.Report(calls[0].latency, adaptive.OK); err != nil {
					return fmt.Errorf("report at %v: %w", time.Duration(calls[0].end)*time.Microsecond, err)
				}
				calls = calls[1:]
			case end <= min(off, nextUpdate):
				if err := closeInterval(); err != nil {
					return err
				}
			case nextUpdate <= off:
				if err := ctrl.Update(ctx); err != nil {
					return fmt.Errorf("update at %v: %w", time.Duration(nextUpdate)*time.Microsecond, err)
				}
				if rate := perSecond(ctrl.Limit()); rate != res.limits[len(res.limits)-1].rate {
					res.limits = append(res.limits, limitPoint{time.Duration(nextUpdate) * time.Microsecond, rate})
				}
				nextUpdate += cfg.adapt.interval.Microseconds()
			default:
				return nil
			}
		}
		return nil
	}

	end := cfg.duration.Microseconds()
	var sent int64
	for at, cost := range cfg.traffic.arrivals(end, cfg.cost) {
		if sent++; sent > maxRequests {
			return nil, fmt.Errorf("the traffic sends more than %d requests; lower its rate or shorten -duration", maxRequests)
		}
		if err := catchUp(at); err != nil {
			return nil, err
		}
		off := time.Duration(at) * time.Microsecond
		now = cfg.start.Add(off)
		var d core.Decision
		if cfg.shape != nil {
			var r *sluice.Reservation
			r, err = lim.ReserveN(ctx, simKey, cost, cfg.shape.maxWait())
			if r != nil {
				d = r.Decision
			}
		} else {
			d, err = lim.AllowN(ctx, simKey, cost)
		}
		if err != nil {
			return nil, fmt.Errorf("request at %v: %w", off, err)
		}
		iv := &res.intervals[cur]
		iv.sent++
		if d.Allowed {
			iv.admitted++
			res.admittedCost += cost
			if cfg.shape != nil {
				// Delay is in whole µs, the resolution of sluice's
				// clock; should a store give a fraction, rounding up
				// keeps the request from acting before its turn.
				turn := at + int64((d.Delay+time.Microsecond-1)/time.Microsecond)
				if turn == at {
					// Admitted at once: it passes through the line
					// now, after every request whose turn came before.
					release(at)
				} else {
					// The key's debt is repaid in order, so a turn is
					// never before an earlier one's and this appends;
					// the search keeps the line in order regardless.
					i, _ := slices.BinarySearch(line, turn+1)
					line = slices.Insert(line, i, turn)
				}
				res.maxLine = max(res.maxLine, int64(len(line)))
			}
			if down != nil {
				latency := down.admit(at)
				iv.served++
				iv.latency += float64(latency)
				if ctrl != nil {
					// The controller learns a call's latency when the
					// call ends.
					calls = append(calls, call{at + int64((latency+time.Microsecond-1)/time.Microsecond), latency})
				}
			}
		} else {
			iv.rejected++
		}
		if cost != 1 {
			res.costs = true
		}
	}
	if err := catchUp(end); err != nil {
		return nil, err
	}
	res.inLine = int64(len(line))
	if tr, ok := cfg.traffic.(*tracePattern); ok {
		res.ignored = tr.beyond(end)
	}
	return res, nil
}

// summary is what the summary lines report about one run. The single
// table and the comparison both print it, so the two agree.
type summary struct {
	sent, admitted, rejected int64
	share                    string   // admitted out of sent, "30.0%"; "" when none was sent
	most                     interval // the first interval that admitted the most
	mostReleased             interval // in shaping mode, the first that released the most
	perSecond                string   // admitted per second over the run
	costPerSecond            string   // the cost admitted per second over the run
}

func summarize(cfg *simConfig, res *simResult) summary {
	s := summary{most: res.intervals[0], mostReleased: res.intervals[0]}
	s.sent, s.admitted, s.rejected = res.totals()
	if s.sent > 0 {
		s.share = fmt.Sprintf("%.1f%%", 100*float64(s.admitted)/float64(s.sent))
	}
	for _, iv := range res.intervals[1:] {
		if iv.admitted > s.most.admitted {
			s.most = iv
		}
		if iv.released > s.mostReleased.released {
			s.mostReleased = iv
		}
	}
	secs := cfg.duration.Seconds()
	s.perSecond = decimal(float64(s.admitted) / secs)
	s.costPerSecond = decimal(float64(res.admittedCost) / secs)
	return s
}

// limitRate formats the limit's rate per second.
func limitRate(cfg *simConfig) string {
	return decimal(float64(cfg.limit.Rate()) / cfg.limit.Period().Seconds())
}

// writeTable prints the header, one row per interval, the totals and the
// summary of one algorithm's run. With a downstream model the rows gain
// its capacity and latency, and under -adapt the adapted limit.
func writeTable(w io.Writer, cfg *simConfig, res *simResult) {
	limitText := cfg.limit.String()
	if cfg.adapt != nil {
		limitText = "limit adapted from " + limitText
	}
	fmt.Fprintf(w, "%s, %s, traffic %s, %s in intervals of %s\n",
		res.alg.Name(), limitText, trafficName(cfg), duration(cfg.duration), duration(cfg.interval))
	if cfg.down != nil {
		fmt.Fprintf(w, "downstream: %v\n", cfg.down)
	}
	if cfg.adapt != nil {
		fmt.Fprintf(w, "law: %v, updated every %s\n", cfg.adapt.law, duration(cfg.adapt.interval))
	}
	if cfg.shape != nil {
		fmt.Fprintf(w, "shaping: each request reserves its turn, with %v\n", cfg.shape)
	}
	fmt.Fprintln(w)

	header := []string{"interval", "sent", "admitted", "rejected"}
	if cfg.shape != nil {
		header = append(header, "released", "line")
	}
	header = append(header, "level")
	if cfg.adapt != nil {
		header = append(header, "limit")
	}
	if cfg.down != nil {
		header = append(header, "capacity", "latency")
	}
	rows := [][]string{header}
	for _, iv := range res.intervals {
		row := []string{span(iv), itoa(iv.sent), itoa(iv.admitted), itoa(iv.rejected)}
		if cfg.shape != nil {
			row = append(row, itoa(iv.released), itoa(iv.line))
		}
		row = append(row, itoa(iv.level))
		if cfg.adapt != nil {
			row = append(row, decimal(iv.limit))
		}
		if cfg.down != nil {
			row = append(row, decimal(iv.capacity), latencyText(iv.meanLatency()))
		}
		rows = append(rows, row)
	}
	sum := summarize(cfg, res)
	total := []string{"total", itoa(sum.sent), itoa(sum.admitted), itoa(sum.rejected)}
	if cfg.shape != nil {
		total = append(total, itoa(res.releases))
	}
	rows = append(rows, append(total, make([]string, len(header)-len(total))...))
	writeColumns(w, rows)

	fmt.Fprintln(w)
	if sum.sent > 0 {
		fmt.Fprintf(w, "sent %d, admitted %d (%s), rejected %d\n", sum.sent, sum.admitted, sum.share, sum.rejected)
	} else {
		fmt.Fprintln(w, "sent 0")
	}
	fmt.Fprintf(w, "most admitted in one interval: %d (%s)\n", sum.most.admitted, span(sum.most))
	if cfg.shape != nil {
		writeShapingSummary(w, cfg, res, sum)
	}
	switch {
	case cfg.adapt != nil:
		fmt.Fprintf(w, "admitted per second over the run: %s (the downstream's capacity: %s per second on average)\n", sum.perSecond, decimal(cfg.down.meanCapacity(cfg.duration)))
	case cfg.down != nil:
		fmt.Fprintf(w, "admitted per second over the run: %s (the limit's rate: %s per second; the downstream's capacity: %s on average)\n",
			sum.perSecond, limitRate(cfg), decimal(cfg.down.meanCapacity(cfg.duration)))
	default:
		fmt.Fprintf(w, "admitted per second over the run: %s (the limit's rate: %s per second)\n", sum.perSecond, limitRate(cfg))
	}
	if res.costs {
		fmt.Fprintf(w, "cost admitted: %d, %s per second\n", res.admittedCost, sum.costPerSecond)
	}
	if cfg.adapt != nil {
		var ends []string
		for _, e := range phaseEnds(cfg, res) {
			ends = append(ends, fmt.Sprintf("%s at %s (capacity %s, %+.1f%%)", decimal(e.limit), duration(e.at), decimal(e.capacity), 100*e.deviation()))
		}
		fmt.Fprintf(w, "the limit as each capacity ends, per second: %s\n", strings.Join(ends, "; "))
		fmt.Fprintln(w, "limit: the adapted limit's rate per second at each interval's end")
	}
	if cfg.shape != nil {
		fmt.Fprintln(w, "released: the requests whose turn came in the interval, those admitted at once included")
		fmt.Fprintln(w, "line: the requests admitted and still waiting for their turn at the interval's end")
	}
	if cfg.down != nil {
		fmt.Fprintln(w, "capacity: the downstream's, per second, at each interval's end")
		fmt.Fprintln(w, "latency: the mean latency of the requests admitted in the interval")
	}
	if cfg.adapt != nil {
		fmt.Fprintf(w, "level: the capacity left at each interval's end, out of the adapted limit's burst (%d at the start)\n", res.capacity)
		return
	}
	fmt.Fprintf(w, "level: the capacity left at each interval's end, out of %d", res.capacity)
	if res.capacity != cfg.limit.Burst() {
		fmt.Fprintf(w, " (%s counts the rate per window and ignores the burst)", res.alg.Name())
	}
	fmt.Fprintln(w)
}

// writeShapingSummary prints the summary lines of shaping mode: how
// smooth the releases were, against the limit's spacing, and what was
// left in line.
func writeShapingSummary(w io.Writer, cfg *simConfig, res *simResult, sum summary) {
	fmt.Fprintf(w, "most released in one interval: %d (%s)\n", sum.mostReleased.released, span(sum.mostReleased))
	// The spacing of a burst of 1: rate tokens a period.
	spacing := cfg.limit.Period() / time.Duration(cfg.limit.Rate())
	if res.releases < 2 {
		fmt.Fprintf(w, "gap between consecutive releases: none, %d released (the limit's spacing: %s)\n", res.releases, duration(spacing))
	} else {
		fmt.Fprintf(w, "gap between consecutive releases: smallest %s, largest %s (the limit's spacing: %s)\n",
			duration(res.minGap), duration(res.maxGap), duration(spacing))
	}
	fmt.Fprintf(w, "longest line: %d; still in line at the end: %d\n", res.maxLine, res.inLine)
}

// phaseEnd is the adapted limit at the end of one of the downstream's
// capacities: just before it changes, or at the end of the run.
type phaseEnd struct {
	at              time.Duration // the instant the capacity ends
	limit, capacity float64       // a second
}

// deviation returns how far the limit is from the capacity, as a fraction
// of the capacity: +0.05 is 5 % above it.
func (e phaseEnd) deviation() float64 { return (e.limit - e.capacity) / e.capacity }

// phaseEnds returns the limit at the end of each of the downstream's
// capacities, in order.
func phaseEnds(cfg *simConfig, res *simResult) []phaseEnd {
	steps := cfg.down.steps
	ends := make([]phaseEnd, len(steps))
	for i, s := range steps {
		at := cfg.duration
		if i+1 < len(steps) {
			at = time.Duration(steps[i+1].at) * time.Microsecond
		}
		ends[i] = phaseEnd{at: at, limit: res.limitAt(at), capacity: s.perSecond()}
	}
	return ends
}

// latencyText formats a mean latency to a tenth of a millisecond, or a
// millisecond from a second up; "-" for none.
func latencyText(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < time.Second:
		return d.Round(100 * time.Microsecond).String()
	}
	return d.Round(time.Millisecond).String()
}

// writeComparison prints the runs of several algorithms on the same
// traffic: one row per interval with the requests sent and what each
// algorithm admitted, the totals, then a row of summary per algorithm.
func writeComparison(w io.Writer, cfg *simConfig, results []*simResult) {
	fmt.Fprintf(w, "%d algorithms, %v, traffic %s, %s in intervals of %s\n\n",
		len(results), cfg.limit, trafficName(cfg), duration(cfg.duration), duration(cfg.interval))

	header := []string{"interval", "sent"}
	for _, res := range results {
		header = append(header, res.alg.Name())
	}
	rows := [][]string{header}
	for i, iv := range results[0].intervals {
		row := []string{span(iv), itoa(iv.sent)}
		for _, res := range results {
			row = append(row, itoa(res.intervals[i].admitted))
		}
		rows = append(rows, row)
	}
	sums := make([]summary, len(results))
	total := []string{"total", ""}
	costs := false
	for i, res := range results {
		sums[i] = summarize(cfg, res)
		total[1] = itoa(sums[i].sent) // the same for every run
		total = append(total, itoa(sums[i].admitted))
		costs = costs || res.costs
	}
	rows = append(rows, total)
	writeColumns(w, rows)
	fmt.Fprintln(w)

	header = []string{"algorithm", "admitted", "rejected", "most in one interval", "per second"}
	if costs {
		header = append(header, "cost admitted", "cost per second")
	}
	rows = [][]string{append(header, "capacity")}
	var ignore []string // the algorithms that ignore the burst
	for i, res := range results {
		sum := sums[i]
		admitted := itoa(sum.admitted)
		if sum.share != "" {
			admitted += " (" + sum.share + ")"
		}
		row := []string{res.alg.Name(), admitted, itoa(sum.rejected), fmt.Sprintf("%d (%s)", sum.most.admitted, span(sum.most)), sum.perSecond}
		if costs {
			row = append(row, itoa(res.admittedCost), sum.costPerSecond)
		}
		rows = append(rows, append(row, itoa(res.capacity)))
		if res.capacity != cfg.limit.Burst() {
			ignore = append(ignore, res.alg.Name())
		}
	}
	writeColumns(w, rows)

	fmt.Fprintln(w)
	fmt.Fprintln(w, "each algorithm's column: the requests it admitted in the interval, out of the same requests sent to each")
	fmt.Fprintf(w, "per second: admitted per second over the run (the limit's rate: %s per second)\n", limitRate(cfg))
	fmt.Fprint(w, "capacity: the most a fresh key admits at once")
	if len(ignore) > 0 {
		verb := "counts the rate per window and ignores"
		if len(ignore) > 1 {
			verb = "count the rate per window and ignore"
		}
		fmt.Fprintf(w, " (%s %s the burst)", andList(ignore), verb)
	}
	fmt.Fprintln(w)
}

// andList joins names as prose: "a", "a and b", "a, b and c".
func andList(names []string) string {
	if len(names) == 1 {
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// writeColumns prints rows as aligned columns: the first left-aligned, the
// others right-aligned, two spaces apart.
func writeColumns(w io.Writer, rows [][]string) {
	widths := make([]int, len(rows[0]))
	for _, row := range rows {
		for i, cell := range row {
			widths[i] = max(widths[i], len(cell))
		}
	}
	var b strings.Builder
	for _, row := range rows {
		b.Reset()
		for i, cell := range row {
			pad := strings.Repeat(" ", widths[i]-len(cell))
			if i == 0 {
				b.WriteString(cell + pad)
			} else {
				b.WriteString("  " + pad + cell)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}

// trafficName is the -traffic value as the user gave it, with a trace's
// request count.
func trafficName(cfg *simConfig) string {
	if p, ok := cfg.traffic.(*tracePattern); ok {
		return fmt.Sprintf("%s (%d requests)", cfg.trafficSpec, len(p.reqs))
	}
	return cfg.trafficSpec
}

// duration formats d as [time.Duration.String] does, without its trailing
// zero units: 1m rather than 1m0s.
func duration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func countName(n uint64) string {
	if n == math.MaxUint64 {
		return "more than 2^64"
	}
	return strconv.FormatUint(n, 10)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// span formats an interval as "1.5s-2s".
func span(iv interval) string { return seconds(iv.start) + "-" + seconds(iv.end) }

// seconds formats d exactly as decimal seconds with an "s": 0s, 0.1s, 90s.
func seconds(d time.Duration) string {
	us := d.Microseconds()
	s := itoa(us / 1e6)
	if frac := us % 1e6; frac != 0 {
		s += strings.TrimRight(fmt.Sprintf(".%06d", frac), "0")
	}
	return s + "s"
}

// decimal formats x with up to two decimals, or three significant digits
// below 1.
func decimal(x float64) string {
	if x != 0 && x < 1 {
		return strconv.FormatFloat(x, 'g', 3, 64)
	}
	s := strconv.FormatFloat(x, 'f', 2, 64)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}
