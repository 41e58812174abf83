package loadgen

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Defaults of [Config]'s fields.
const (
	DefaultStreams        = 64
	DefaultConns          = 4
	DefaultConnectTimeout = 5 * time.Second
	DefaultGrace          = 5 * time.Second
)

// GCPercent is the garbage collector's target that the programs running
// the load generator (rlsload, serve/compare's tests) set unless GOGC is
// set: sluice-serve's own. At Go's default of 100, collecting took a
// seventh of the load generator's CPU, on the cores the servers
// measured share.
const GCPercent = 400

// ErrConfig is returned, wrapped, by [Run] for a [Config] it cannot use.
var ErrConfig = errors.New("loadgen: invalid config")

// Config describes one run of [Run]. The zero value is not usable:
// Addr, Duration and Requests are required.
type Config struct {
	// Addr is the RLS server's gRPC address, "host:port". Connections are
	// plaintext (no TLS).
	Addr string

	// Streams is the number of RPCs kept in flight: each of Streams
	// workers sends ShouldRateLimit, waits for the answer and sends the
	// next (a closed loop, so a slower server is sent fewer RPCs, as
	// Envoy's callers would be). The default is 64.
	Streams int

	// Conns is the number of HTTP/2 connections the workers share,
	// worker w using connection w%Conns. The default is 4, or Streams if
	// that is fewer. One connection carries its streams through one
	// socket and one writer goroutine on each side, which can become the
	// bottleneck before the server does; Envoy itself opens a connection
	// per worker thread, so a few connections is what a rate-limit
	// service sees from a proxy.
	Conns int

	// Warmup is sent before the measurement starts and not counted in
	// [Result]: it opens the connections' streams, fills the servers'
	// pools and caches, and lets the Go runtimes grow their heaps. The
	// default is none. Between the two, every worker waits until the
	// warmup's RPCs have been answered (up to Grace), so that the
	// measurement starts with none in flight.
	Warmup time.Duration

	// Duration is how long the measurement lasts, after Warmup.
	Duration time.Duration

	// Requests returns the request that worker w sends as its i-th RPC
	// (i counts from 0 for each worker, warmup included). It is called
	// from every worker at once, so it must be safe for concurrent use;
	// it should return prebuilt requests (see [Keyed]) rather than build
	// one per call, whose allocation would be measured with the server.
	// A request of a Prebuilt workload is encoded once, before the run,
	// and its bytes are sent again each time it is returned, so it must
	// not be modified until Run returns; any other request is encoded
	// each time it is sent.
	Requests func(worker, i int) *rlsv3.RateLimitRequest

	// Prebuilt are the workloads whose requests Requests returns, if
	// any: Run encodes their requests before it starts, so that the
	// measurement encodes none (a fresh workload's keys are each sent a
	// few times in a run).
	Prebuilt []*Workload

	// Observe, if set, is called by worker w after its i-th RPC returned
	// a response, warmup included, with that response; RPCs that failed
	// are not observed. It is called from every worker at once, after
	// the RPC's latency is recorded, and must be safe for concurrent use
	// and quick. The response is the worker's, decoded into the same
	// messages for its next RPC: read it before returning, and keep
	// nothing of it. Tests use it to count admissions per key.
	Observe func(worker, i int, resp *rlsv3.RateLimitResponse)

	// Sample, if set, is called twice from Run's own goroutine, each
	// time with no RPC in flight: with true once the warmup's RPCs have
	// been answered and before the measurement's first is sent, and
	// with false once every measured RPC has been answered (or
	// cancelled). Read counters there, such as a server's CPU time or
	// Redis's INFO, to cover the measurement alone. It is not called if
	// the run is interrupted.
	Sample func(start bool)

	// ConnectTimeout bounds the wait for every connection to be ready
	// before the run starts. The default is 5 seconds.
	ConnectTimeout time.Duration

	// Grace is how long RPCs still in flight when Duration ends may take
	// before they are cancelled and counted as errors. The default is 5
	// seconds.
	Grace time.Duration
}

// Result is what [Run] measured, between the end of the warmup and the
// last answer of the measurement.
type Result struct {
	// RPCs is the number of ShouldRateLimit calls started during the
	// measurement (all of them finished before Run returned).
	RPCs int64
	// OK, OverLimit and Unknown count the answers by their overall_code.
	OK, OverLimit, Unknown int64
	// Errors counts the RPCs that returned an error instead of an
	// answer, including those cancelled after the grace period.
	Errors int64
	// FirstError is the first of those errors, or nil.
	FirstError error

	// DescriptorOK counts, for each position in the requests' descriptor
	// lists, the answers whose status at that position was OK: with
	// several descriptors per request it shows which one denied.
	DescriptorOK []int64

	// Elapsed is the measurement's length: from the end of the warmup
	// until the last RPC started within Duration was answered.
	Elapsed time.Duration

	// P50, P99 and P999 are the latency percentiles of the answered RPCs,
	// as the client saw them (from the call until the response was
	// decoded), within 1.6%.
	P50, P99, P999 time.Duration
	// Max is the longest latency of an answered RPC.
	Max time.Duration

	hist *histogram
}

// Decisions returns the number of answered RPCs: OK + OverLimit +
// Unknown. Each RPC is one decision, however many descriptors it holds.
func (r Result) Decisions() int64 { return r.OK + r.OverLimit + r.Unknown }

// DecisionsPerSec returns [Result.Decisions] divided by Elapsed in
// seconds, or 0 for an empty result.
func (r Result) DecisionsPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Decisions()) / r.Elapsed.Seconds()
}

// Quantile returns the latency below which a fraction q of the answered
// RPCs lie, within 1.6%; Quantile(1) is the maximum. It returns 0 for an
// empty result.
func (r Result) Quantile(q float64) time.Duration {
	if r.hist == nil {
		return 0
	}
	return r.hist.quantile(q)
}

// String summarises r on one line.
func (r Result) String() string {
	return fmt.Sprintf("%.0f decisions/s over %v: %d RPCs, %d OK, %d over limit, %d unknown, %d errors; latency p50 %v, p99 %v, p99.9 %v, max %v",
		r.DecisionsPerSec(), r.Elapsed.Round(time.Millisecond), r.RPCs, r.OK, r.OverLimit, r.Unknown, r.Errors,
		r.P50, r.P99, r.P999, r.Max)
}

// Phases of a run, which workers read before each RPC.
const (
	phaseWarmup  int32 = iota
	phaseDrain         // the warmup is over: wait at the gate
	phaseMeasure       // counted
	phaseStop
)

// gate holds the workers between the warmup and the measurement, so
// that no RPC is in flight when the measurement starts.
type gate struct {
	phase   atomic.Int32
	waiting atomic.Int32  // workers at the gate
	all     chan struct{} // closed when every worker is at the gate
	open    chan struct{} // closed when the measurement starts
	workers int32
}

// wait is a worker's stop at the gate. It reports false if ctx ended
// first.
func (g *gate) wait(ctx context.Context) bool {
	if g.waiting.Add(1) == g.workers {
		close(g.all)
	}
	select {
	case <-g.open:
		return true
	case <-ctx.Done():
		return false
	}
}

// workerStats is one worker's tally; only that worker writes it until
// the run is over.
type workerStats struct {
	hist                         histogram
	rpcs, ok, over, unknown, err int64
	firstErr                     error
	descOK                       []int64
}

// Run sends ShouldRateLimit RPCs to cfg.Addr from cfg.Streams workers for
// cfg.Warmup and then cfg.Duration, and returns what it measured. It
// returns an error, with no result, if cfg is invalid ([ErrConfig]), a
// connection is not ready within cfg.ConnectTimeout, or ctx is done
// before they all are (ctx's error). Failed RPCs do not stop the run:
// they are counted in [Result.Errors]. If ctx is done before the run is
// over, or the warmup's RPCs are not all answered within cfg.Grace, Run
// stops the workers and returns the result so far with an error (ctx's,
// in the first case).
//
// Every goroutine and connection Run starts has ended when it returns.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Result{}, err
	}
	c := newCodec()
	for _, w := range cfg.Prebuilt {
		if err := c.encode(w.reqs); err != nil {
			return Result{}, fmt.Errorf("%w: %v", ErrConfig, err)
		}
	}
	conns, err := dialAll(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()

	// runCtx ends the RPCs: when ctx is done, or when the grace after
	// the measurement has passed.
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	g := &gate{all: make(chan struct{}), open: make(chan struct{}), workers: int32(cfg.Streams)}
	var start time.Time
	if cfg.Warmup == 0 {
		// No warmup: the workers measure from their first RPC.
		if cfg.Sample != nil {
			cfg.Sample(true)
		}
		start = time.Now()
		g.phase.Store(phaseMeasure)
	}
	stats := make([]*workerStats, cfg.Streams)
	var wg sync.WaitGroup
	for w := range cfg.Streams {
		stats[w] = new(workerStats)
		conn := conns[w%len(conns)]
		wg.Go(func() { work(runCtx, cfg, c, w, conn, g, stats[w]) })
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()

	stop := func(err error) (Result, error) {
		g.phase.Store(phaseStop)
		cancel()
		<-done
		if start.IsZero() {
			start = time.Now()
		}
		return merge(stats, time.Since(start)), err
	}
	if cfg.Warmup > 0 {
		if !sleep(ctx, cfg.Warmup) {
			return stop(ctx.Err())
		}
		// Let the warmup's RPCs finish, and start every worker
		// afresh.
		g.phase.Store(phaseDrain)
		drain := time.NewTimer(cfg.Grace)
		defer drain.Stop()
		select {
		case <-g.all:
		case <-drain.C:
			return stop(fmt.Errorf("loadgen: %d of %d warmup RPCs still unanswered after %v", cfg.Streams-int(g.waiting.Load()), cfg.Streams, cfg.Grace))
		case <-ctx.Done():
			return stop(ctx.Err())
		}
		if cfg.Sample != nil {
			cfg.Sample(true)
		}
		start = time.Now()
		g.phase.Store(phaseMeasure)
		close(g.open)
	}
	if !sleep(ctx, cfg.Duration) {
		return stop(ctx.Err())
	}
	g.phase.Store(phaseStop)
	grace := time.NewTimer(cfg.Grace)
	defer grace.Stop()
	select {
	case <-done:
	case <-grace.C:
		cancel()
		<-done
	case <-ctx.Done():
		return stop(ctx.Err())
	}
	elapsed := time.Since(start)
	if cfg.Sample != nil {
		cfg.Sample(false)
	}
	return merge(stats, elapsed), nil
}

func (cfg Config) withDefaults() (Config, error) {
	if cfg.Addr == "" {
		return cfg, fmt.Errorf("%w: no Addr", ErrConfig)
	}
	if cfg.Requests == nil {
		return cfg, fmt.Errorf("%w: no Requests", ErrConfig)
	}
	if cfg.Duration <= 0 {
		return cfg, fmt.Errorf("%w: Duration %v, want > 0", ErrConfig, cfg.Duration)
	}
	if cfg.Streams < 0 || cfg.Conns < 0 || cfg.Warmup < 0 || cfg.ConnectTimeout < 0 || cfg.Grace < 0 {
		return cfg, fmt.Errorf("%w: a negative Streams, Conns, Warmup, ConnectTimeout or Grace", ErrConfig)
	}
	if cfg.Streams == 0 {
		cfg.Streams = DefaultStreams
	}
	if cfg.Conns == 0 {
		cfg.Conns = DefaultConns
	}
	cfg.Conns = min(cfg.Conns, cfg.Streams)
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.Grace == 0 {
		cfg.Grace = DefaultGrace
	}
	return cfg, nil
}

// dialAll opens cfg.Conns connections to cfg.Addr, each ready for
// calls, within cfg.ConnectTimeout. If parent ends first, its error is
// the one returned, not the dial's.
func dialAll(parent context.Context, cfg Config) ([]*conn, error) {
	ctx, cancel := context.WithTimeout(parent, cfg.ConnectTimeout)
	defer cancel()
	conns := make([]*conn, 0, cfg.Conns)
	for i := range cfg.Conns {
		// Worker w uses connection w%Conns.
		streams := cfg.Streams / cfg.Conns
		if i < cfg.Streams%cfg.Conns {
			streams++
		}
		c, err := dial(ctx, cfg.Addr, streams)
		if err != nil {
			for _, c := range conns {
				c.Close()
			}
			// A dial cut off at parent's deadline may fail before parent's
			// own timer has ended it.
			if d, ok := parent.Deadline(); parent.Err() != nil || ok && !time.Now().Before(d) {
				return nil, fmt.Errorf("loadgen: connecting to %s: %w", cfg.Addr, cmp.Or(context.Cause(parent), context.DeadlineExceeded))
			}
			return nil, fmt.Errorf("loadgen: %s not ready within %v: %w", cfg.Addr, cfg.ConnectTimeout, err)
		}
		conns = append(conns, c)
	}
	return conns, nil
}

// work is one worker's loop: send, wait, record, until the phase is stop
// or ctx is done. Its answers are decoded into one reply, reused.
func work(ctx context.Context, cfg Config, codec *codec, w int, conn *conn, g *gate, st *workerStats) {
	r := new(reply)
	cl := newCall()
	for i := 0; ; i++ {
		p := g.phase.Load()
		if p == phaseDrain {
			if !g.wait(ctx) {
				return
			}
			p = g.phase.Load()
		}
		if p == phaseStop || ctx.Err() != nil {
			return
		}
		req := cfg.Requests(w, i)
		t0 := time.Now()
		err := roundTrip(ctx, codec, conn, cl, req, r)
		lat := time.Since(t0)
		resp := &r.msg
		if p == phaseMeasure {
			st.count(resp, err, lat)
		}
		if err == nil && cfg.Observe != nil {
			cfg.Observe(w, i, resp)
		}
	}
}

// roundTrip sends req on conn, with cl, and decodes the answer into r.
func roundTrip(ctx context.Context, codec *codec, conn *conn, cl *call, req *rlsv3.RateLimitRequest, r *reply) error {
	msg, err := codec.message(req)
	if err != nil {
		return status.Errorf(codes.Internal, "loadgen: encoding the request: %v", err)
	}
	b, err := conn.invoke(ctx, msg, cl)
	if err != nil {
		return err
	}
	if err := r.unmarshal(b); err != nil {
		return status.Errorf(codes.Internal, "loadgen: decoding the response: %v", err)
	}
	return nil
}

// count records one measured RPC.
func (st *workerStats) count(resp *rlsv3.RateLimitResponse, err error, lat time.Duration) {
	st.rpcs++
	if err != nil {
		st.err++
		if st.firstErr == nil {
			st.firstErr = err
		}
		return
	}
	st.hist.record(lat)
	switch resp.GetOverallCode() {
	case rlsv3.RateLimitResponse_OK:
		st.ok++
	case rlsv3.RateLimitResponse_OVER_LIMIT:
		st.over++
	default:
		st.unknown++
	}
	statuses := resp.GetStatuses()
	if len(statuses) > len(st.descOK) {
		st.descOK = append(st.descOK, make([]int64, len(statuses)-len(st.descOK))...)
	}
	for j, s := range statuses {
		if s.GetCode() == rlsv3.RateLimitResponse_OK {
			st.descOK[j]++
		}
	}
}

// merge adds up the workers' tallies.
func merge(stats []*workerStats, elapsed time.Duration) Result {
	r := Result{Elapsed: elapsed, hist: new(histogram)}
	for _, st := range stats {
		r.RPCs += st.rpcs
		r.OK += st.ok
		r.OverLimit += st.over
		r.Unknown += st.unknown
		r.Errors += st.err
		if r.FirstError == nil {
			r.FirstError = st.firstErr
		}
		if len(st.descOK) > len(r.DescriptorOK) {
			r.DescriptorOK = append(r.DescriptorOK, make([]int64, len(st.descOK)-len(r.DescriptorOK))...)
		}
		for j, n := range st.descOK {
			r.DescriptorOK[j] += n
		}
		r.hist.add(&st.hist)
	}
	r.P50, r.P99, r.P999 = r.hist.quantile(0.5), r.hist.quantile(0.99), r.hist.quantile(0.999)
	r.Max = r.hist.quantile(1)
	return r
}

// sleep waits for d or until ctx is done, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
