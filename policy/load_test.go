package policy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
)

// The outage tests drive a breaker with 64 goroutines, each calling in a
// loop with a short pause (a service's handlers, not a benchmark), and
// record every decision: when it began, how long it took, what it said.
// One scenario with 64 goroutines runs at a time (heavy), so that the
// latencies measured are the breaker's, not those of another scenario's
// load on the same cores.

const (
	loadGoroutines = 64
	loadPause      = 2 * time.Millisecond // between one goroutine's calls
	loadKeys       = 4
)

// heavy admits one load scenario at a time.
var heavy = make(chan struct{}, 1)

// exclusive waits until no other load scenario runs, and holds the slot
// until t ends.
func exclusive(t *testing.T) {
	t.Helper()
	heavy <- struct{}{}
	t.Cleanup(func() { <-heavy })
}

// sample is one decision of the load.
type sample struct {
	at      time.Duration // when the call began, after the load's t0
	took    time.Duration
	ran     time.Duration // took, on the process clock of the load (see startLoad)
	key     int
	allowed bool
	source  core.Source
	err     error
}

func (s sample) end() time.Duration { return s.at + s.took }

// load is 64 goroutines deciding through one store.
type load struct {
	t0      time.Time
	stop    chan struct{}
	wg      sync.WaitGroup
	panics  atomic.Int64
	calls   atomic.Int64
	samples [loadGoroutines][]sample
	slept   [loadGoroutines][]stall // each goroutine's late wake-ups
	stopped []sample
	stalls  []stall // what the canary and the goroutines' pauses saw
}

// stall is a time the process did not run a goroutine that was due: the
// canary, which sleeps a millisecond at a time, or a load goroutine in its
// pause, woke late by late at at. On a machine shared with other jobs,
// such stalls come and go; a decision late by as much as a goroutine that
// only slept is the machine's, not the breaker's.
type stall struct {
	at, late time.Duration
}

// begunKey is the context key of the instant a load's call began, which
// a recorder beneath the breaker reads (see checkOpenQuiet).
type begunKey struct{}

// canaryStall is the lateness from which the canary records a stall.
const canaryStall = 2 * time.Millisecond

// startLoad starts the goroutines, each calling store with newReq of one
// of loadKeys keys in turn, pausing loadPause between calls, from t0; pass
// a zero pause for a burst that opens a client's connections. Each sample
// also records its span on clock, a breaker's process clock (see meter),
// on which the breaker's deadlines run; a nil clock is the wall clock.
func startLoad(store core.Store, t0 time.Time, pause time.Duration, clock func() int64, newReq func(key string) core.Request) *load {
	if clock == nil {
		clock = func() int64 { return time.Now().UnixNano() }
	}
	l := &load{t0: t0, stop: make(chan struct{})}
	keys := make([]string, loadKeys)
	for i := range keys {
		keys[i] = "key" + strconv.Itoa(i)
	}
	// The canary: a goroutine that only sleeps, so that its lateness is
	// the process's (a stall of the machine, a collection), not the
	// store's.
	l.wg.Go(func() {
		for {
			select {
			case <-l.stop:
				return
			default:
			}
			before := time.Now()
			time.Sleep(time.Millisecond)
			if late := time.Since(before) - time.Millisecond; late >= canaryStall {
				l.stalls = append(l.stalls, stall{at: time.Since(t0), late: late})
			}
		}
	})
	for g := range loadGoroutines {
		l.wg.Go(func() {
			defer func() {
				if p := recover(); p != nil {
					l.panics.Add(1)
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a safety net only
			defer cancel()
			for i := g; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				k := i % loadKeys
				start, p0 := time.Now(), clock()
				d, err := store.Apply(context.WithValue(ctx, begunKey{}, start), newReq(keys[k]))
				took, ran := time.Since(start), time.Duration(clock()-p0)
				l.calls.Add(1)
				l.samples[g] = append(l.samples[g], sample{
					at: start.Sub(t0), took: took, ran: ran, key: k,
					allowed: d.Allowed, source: d.Source, err: err,
				})
				if errors.Is(err, core.ErrClosed) {
					return
				}
				if pause > 0 {
					// An oversleep is the scheduler's delay: a stall seen
					// by this goroutine, as by the canary.
					before := time.Now()
					time.Sleep(pause)
					if late := time.Since(before) - pause; late >= canaryStall {
						l.slept[g] = append(l.slept[g], stall{at: time.Since(t0), late: late})
					}
				}
			}
		})
	}
	return l
}

// Stop stops the goroutines, waits for them and returns every sample, by
// starting time. Later calls return the same samples.
func (l *load) Stop() []sample {
	if l.stopped != nil {
		return l.stopped
	}
	close(l.stop)
	l.wg.Wait()
	all := []sample{}
	for _, s := range l.samples {
		all = append(all, s...)
	}
	for _, s := range l.slept {
		l.stalls = append(l.stalls, s...)
	}
	slices.SortFunc(all, func(a, b sample) int { return int(a.at - b.at) })
	l.stopped = all
	return all
}

// between returns the samples that began in [from, to).
func between(samples []sample, from, to time.Duration) []sample {
	var out []sample
	for _, s := range samples {
		if s.at >= from && s.at < to {
			out = append(out, s)
		}
	}
	return out
}

// latency summarises the time decisions took.
type latency struct {
	n                  int
	p50, p99, p999, mx time.Duration
}

func latencies(samples []sample) latency {
	if len(samples) == 0 {
		return latency{}
	}
	d := make([]time.Duration, len(samples))
	for i, s := range samples {
		d[i] = s.took
	}
	slices.Sort(d)
	q := func(p float64) time.Duration { return d[min(len(d)-1, int(math.Ceil(p*float64(len(d))))-1)] }
	return latency{n: len(d), p50: q(0.5), p99: q(0.99), p999: q(0.999), mx: d[len(d)-1]}
}

func (l latency) String() string {
	return fmt.Sprintf("%d decisions, p50 %v, p99 %v, p99.9 %v, max %v", l.n,
		l.p50.Round(time.Microsecond), l.p99.Round(time.Microsecond), l.p999.Round(time.Microsecond), l.mx.Round(time.Microsecond))
}

// errorsOf counts the samples with an error and returns the first few.
func errorsOf(samples []sample) (int, []string) {
	n := 0
	var first []string
	for _, s := range samples {
		if s.err != nil {
			n++
			if len(first) < 5 {
				first = append(first, fmt.Sprintf("at %v: %v", s.at.Round(time.Millisecond), s.err))
			}
		}
	}
	return n, first
}

// recorder sits between a breaker and its store and records when each
// call to the store began and what errors came back.
type recorder struct {
	core.Store
	t0 time.Time

	mu     sync.Mutex
	starts []time.Duration // when each call reached the store
	begun  []time.Duration // when its caller made it (see begunKey)
	errs   map[string]int  // by text, at most maxErrs texts
	codes  map[string]int  // by Redis error code
	failed int             // errors IsStoreFailure counts
	other  int             // errors it does not
}

const maxErrs = 50

func newRecorder(s core.Store, t0 time.Time) *recorder {
	return &recorder{Store: s, t0: t0, errs: make(map[string]int), codes: make(map[string]int)}
}

func (r *recorder) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	at := time.Since(r.t0)
	d, err := r.Store.Apply(ctx, req)
	r.record(ctx, at, err)
	return d, err
}

// begunAt returns when the caller made the call of ctx that reached the
// store at at: its load's instant, or at for a call of no load's.
func (r *recorder) begunAt(ctx context.Context, at time.Duration) time.Duration {
	if start, ok := ctx.Value(begunKey{}).(time.Time); ok {
		return start.Sub(r.t0)
	}
	return at
}

// ApplyAll records the batch as one call.
func (r *recorder) ApplyAll(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	at := time.Since(r.t0)
	err := r.Store.ApplyAll(ctx, reqs, out)
	r.record(ctx, at, err)
	return err
}

// record records a call that began at at and ended with err.
func (r *recorder) record(ctx context.Context, at time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.starts = append(r.starts, at)
	r.begun = append(r.begun, r.begunAt(ctx, at))
	if err != nil {
		if ctx.Err() == nil || !errors.Is(err, ctx.Err()) {
			if IsStoreFailure(err) {
				r.failed++
			} else {
				r.other++
			}
		}
		if se, ok := errors.AsType[*core.StoreError](err); ok && se.Type != "" {
			r.codes[se.Type]++
		}
		if _, ok := r.errs[err.Error()]; ok || len(r.errs) < maxErrs {
			r.errs[err.Error()]++
		}
	}
}

// callsBetween counts the calls that began in [from, to).
func (r *recorder) callsBetween(from, to time.Duration) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, at := range r.starts {
		if at >= from && at < to {
			n++
		}
	}
	return n
}

// begunBefore returns how many of the calls that reached the store in
// [from, to) their callers made before the instant made.
func (r *recorder) begunBefore(from, to, made time.Duration) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for i, at := range r.starts {
		if at >= from && at < to && r.begun[i] < made {
			n++
		}
	}
	return n
}

// code returns how many errors carried the Redis failure code.
func (r *recorder) code(code string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.codes[code]
}

// errorTexts returns the errors seen whose text contains sub, with counts.
func (r *recorder) errorTexts(sub string) map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for e, n := range r.errs {
		if sub == "" || strings.Contains(e, sub) {
			out[e] = n
		}
	}
	return out
}

// changes records a breaker's changes of state, as its hook delivers them.
type changes struct {
	mu  sync.Mutex
	all []Change
}

func (c *changes) add(ch Change) {
	c.mu.Lock()
	c.all = append(c.all, ch)
	c.mu.Unlock()
}

// reset forgets the changes recorded so far.
func (c *changes) reset() {
	c.mu.Lock()
	c.all = nil
	c.mu.Unlock()
}

func (c *changes) list() []Change {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.all)
}

// waitState polls until b is in state s, or timeout passes; it returns
// when it saw the state, and whether it did.
func waitState(b *Breaker, s State, timeout time.Duration) (time.Time, bool) {
	deadline := time.Now().Add(timeout)
	for {
		if b.State() == s {
			return time.Now(), true
		}
		if time.Now().After(deadline) {
			return time.Time{}, false
		}
		time.Sleep(time.Millisecond)
	}
}

// explained reports whether the process stalled, as the canary saw it,
// for at least d while s was under way: then a decision late by d says
// nothing of the store or the breaker.
func (l *load) explained(s sample, d time.Duration) bool {
	for _, st := range l.stalls {
		// A stall ends when the canary wakes, and began late before.
		if st.at >= s.at && st.at-st.late <= s.end() && st.late >= d {
			return true
		}
	}
	return false
}
