package adaptive_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/stores/memstore"
)

// downstream is a simulated service on a virtual clock: a FIFO queue
// served at capacity requests a second, as a fluid. A request waits for
// the backlog ahead of it, so its latency is base plus backlog/capacity:
// flat while arrivals stay below capacity, rising without bound beyond
// it. A request that would wait past timeout is refused at once (a
// failure) and not queued.
type downstream struct {
	capacity float64       // requests a second
	base     time.Duration // latency of an idle service
	timeout  time.Duration
	backlog  float64 // requests queued, as a fluid
	last     time.Time
	served   int // requests admitted to the queue
}

// serve admits a request arriving at now and returns its latency, and
// false if it failed.
func (d *downstream) serve(now time.Time) (time.Duration, bool) {
	if !d.last.IsZero() {
		d.backlog = max(d.backlog-d.capacity*now.Sub(d.last).Seconds(), 0)
	}
	d.last = now
	wait := time.Duration((d.backlog + 1) / d.capacity * float64(time.Second))
	if d.base+wait > d.timeout {
		return d.timeout, false
	}
	d.backlog++
	d.served++
	return d.base + wait, true
}

// completion is a call that will end at at, with its latency.
type completion struct {
	at      time.Time
	latency time.Duration
	ok      bool
	from    int // the instance that made the call
}

// instance is one process of a simulated fleet: its controller and the
// limiter that decides through it.
type instance struct {
	ctrl *adaptive.Controller
	lim  *sluice.Limiter
	next time.Time // its next update
}

// simConfig describes one simulation.
type simConfig struct {
	law       adaptive.Law
	start     int64         // initial rate, per second
	instances int           // controllers sharing the store (1: alone)
	shared    bool          // the controllers share the limit in the store
	offered   float64       // requests a second arriving at the fleet
	duration  time.Duration // of the run
	halveAt   time.Duration // when capacity halves; 0: never
}

// simResult is what a simulation measured.
type simResult struct {
	times  []time.Duration // instants of the samples, from the start
	limits [][]float64     // each instance's rate at each sample
	// admitted counts the calls the fleet let through in each second.
	admitted []int
}

const (
	simCapacity = 200.0
	simInterval = 100 * time.Millisecond
)

var simEpoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// simulate runs cfg on a virtual clock: arrivals evenly spaced at
// cfg.offered a second, handed to the instances in turn, each deciding
// through policy.New(store, WithOverride(ctrl.Override)) on one memstore
// shared by the fleet (one key, so the fleet admits the limit); admitted
// calls go to the downstream, and their completions are reported to the
// instance that made them when they end. Each instance updates once an
// interval, the instances' updates spread over the interval.
func simulate(t *testing.T, cfg simConfig) simResult {
	t.Helper()
	now := simEpoch
	store, err := memstore.New(memstore.Config{Now: func() time.Time { return now }, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	ctx := context.Background()
	initial := sluice.PerSecond(cfg.start).WithBurst(max(cfg.start/10, 1))
	fleet := make([]instance, max(cfg.instances, 1))
	for i := range fleet {
		opts := []adaptive.Option{adaptive.WithInterval(simInterval), adaptive.WithBounds(1, 10000)}
		if cfg.shared {
			opts = append(opts, adaptive.WithShared(store, "downstream"))
		}
		ctrl, err := adaptive.New(initial, cfg.law, opts...)
		if err != nil {
			t.Fatal(err)
		}
		p, err := policy.New(store, policy.WithOverride(ctrl.Override))
		if err != nil {
			t.Fatal(err)
		}
		lim, err := sluice.NewLimiter(p, algorithms.TokenBucket, initial)
		if err != nil {
			t.Fatal(err)
		}
		phase := simInterval * time.Duration(i) / time.Duration(len(fleet))
		fleet[i] = instance{ctrl: ctrl, lim: lim, next: now.Add(simInterval + phase)}
	}
	down := &downstream{capacity: simCapacity, base: 20 * time.Millisecond, timeout: time.Second}
	var pending []completion // in order of their ends: the queue is FIFO
	res := simResult{limits: make([][]float64, len(fleet)), admitted: make([]int, int(cfg.duration/time.Second)+1)}
	gap := time.Duration(float64(time.Second) / cfg.offered)
	end := simEpoch.Add(cfg.duration)
	nextSample := simEpoch
	for turn := 0; now.Before(end); turn++ {
		elapsed := now.Sub(simEpoch)
		if cfg.halveAt > 0 && elapsed >= cfg.halveAt {
			down.capacity = simCapacity / 2
		}
		for len(pending) > 0 && !pending[0].at.After(now) {
			c := pending[0]
			pending = pending[1:]
			o := adaptive.OK
			if !c.ok {
				o = adaptive.Failed
			}
			if err := fleet[c.from].ctrl.Report(c.latency, o); err != nil {
				t.Fatal(err)
			}
		}
		for i := range fleet {
			if !fleet[i].next.After(now) {
				if err := fleet[i].ctrl.Update(ctx); err != nil {
					t.Fatal(err)
				}
				fleet[i].next = fleet[i].next.Add(simInterval)
			}
		}
		if !nextSample.After(now) {
			res.times = append(res.times, elapsed)
			for i := range fleet {
				res.limits[i] = append(res.limits[i], float64(fleet[i].ctrl.Limit().Rate()))
			}
			nextSample = nextSample.Add(simInterval)
		}
		from := turn % len(fleet)
		d, err := fleet[from].lim.Allow(ctx, "downstream")
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			res.admitted[int(elapsed/time.Second)]++
			latency, ok := down.serve(now)
			pending = append(pending, completion{at: now.Add(latency), latency: latency, ok: ok, from: from})
		}
		now = now.Add(gap)
	}
	return res
}

// capacityAt returns the simulated capacity at elapsed.
func (cfg simConfig) capacityAt(elapsed time.Duration) float64 {
	if cfg.halveAt > 0 && elapsed >= cfg.halveAt {
		return simCapacity / 2
	}
	return simCapacity
}

// settled returns when, after from, instance i's limit settled: the
// first sample within ±10 % of capacity from which it stays within ±15 %
// until until; and the largest relative distance from capacity from then
// to until. It returns -1 if the limit never settled.
func (r simResult) settled(cfg simConfig, i int, from, until time.Duration) (time.Duration, float64) {
	at, worst := time.Duration(-1), 0.0
	for k := len(r.times) - 1; k >= 0; k-- {
		t := r.times[k]
		if t < from || t >= until {
			continue
		}
		c := cfg.capacityAt(t)
		dev := math.Abs(r.limits[i][k]-c) / c
		if dev > 0.15 {
			break
		}
		worst = max(worst, dev)
		if dev <= 0.10 {
			at = t - from
		}
	}
	if at < 0 {
		return -1, worst
	}
	// worst may include samples before at; recompute from at.
	worst = 0
	for k, t := range r.times {
		if t >= from+at && t < until {
			c := cfg.capacityAt(t)
			worst = max(worst, math.Abs(r.limits[i][k]-c)/c)
		}
	}
	return at, worst
}

// simLaws are the laws the simulations run, as the docs recommend
// configuring them for this downstream (20 ms at rest, intervals of
// 100 ms): AIMD backs off when the 99th percentile passes twice the
// resting latency and adds 3/s an interval; the gradient law takes its
// defaults but for a faster probe.
func simLaws() []struct {
	name string
	law  adaptive.Law
} {
	return []struct {
		name string
		law  adaptive.Law
	}{
		{"aimd", adaptive.AIMD(adaptive.LatencyAbove(0.99, 40*time.Millisecond), adaptive.Increase(3))},
		{"gradient", adaptive.Gradient(adaptive.Growth(1.5))},
	}
}

// TestConvergence runs each law on the simulated downstream of capacity
// 200/s from 20/s and from 2000/s, halving the capacity at 30 s: the limit
// must come within ±10 % of the capacity within 10 s, within ±10 % of the
// new capacity within 5 s of the halving, and stay within ±15 % of it at
// steady state (10 to 30 s, and 35 to 60 s). It logs the table
// docs/adaptive.md shows.
func TestConvergence(t *testing.T) {
	t.Parallel()
	var table strings.Builder
	table.WriteString("\n| law | start | converged after | after halving | max deviation, steady |\n|---|---|---|---|---|\n")
	for _, l := range simLaws() {
		for _, start := range []int64{20, 2000} {
			cfg := simConfig{law: l.law, start: start, offered: 2500, duration: 60 * time.Second, halveAt: 30 * time.Second}
			r := simulate(t, cfg)
			first, dev1 := r.settled(cfg, 0, 0, 30*time.Second)
			second, dev2 := r.settled(cfg, 0, 30*time.Second, 60*time.Second)
			dev := max(dev1, dev2)
			fmt.Fprintf(&table, "| %s | %d/s | %v | %v | %.1f %% |\n", l.name, start, first, second, dev*100)
			name := fmt.Sprintf("%s from %d/s", l.name, start)
			switch {
			case first < 0 || first > 10*time.Second:
				t.Errorf("%s: settled after %v, want within 10s", name, first)
			case second < 0 || second > 5*time.Second:
				t.Errorf("%s: settled %v after the halving, want within 5s", name, second)
			case dev > 0.15:
				t.Errorf("%s: deviated %.1f%% from capacity at steady state, want ≤ 15%%", name, dev*100)
			}
			if t.Failed() {
				for k, at := range r.times {
					if k%5 == 0 {
						t.Logf("%s: %v limit %.0f", name, at, r.limits[0][k])
					}
				}
			}
		}
	}
	t.Log(table.String())
}

// TestFleetMemstore runs four controllers sharing their limit in one
// memstore (WithShared), each reporting the calls it made to one
// simulated downstream, with updates spread over the interval: at the end
// their limits are within 5 % of one another, and over the last 10 s the
// fleet admitted within 10 % of capacity.
func TestFleetMemstore(t *testing.T) {
	t.Parallel()
	for _, l := range simLaws() {
		cfg := simConfig{law: l.law, start: 20, instances: 4, shared: true, offered: 2500, duration: 30 * time.Second}
		r := simulate(t, cfg)
		last := len(r.times) - 1
		lo, hi := math.Inf(1), 0.0
		for i := range r.limits {
			lo, hi = min(lo, r.limits[i][last]), max(hi, r.limits[i][last])
		}
		admitted := 0
		for _, n := range r.admitted[20:30] {
			admitted += n
		}
		rate := float64(admitted) / 10
		t.Logf("%s: final limits %.0f to %.0f; fleet admitted %.1f/s over the last 10s", l.name, lo, hi, rate)
		if (hi-lo)/hi > 0.05 {
			t.Errorf("%s: final limits %.0f to %.0f differ by more than 5%%", l.name, lo, hi)
		}
		if math.Abs(rate-simCapacity)/simCapacity > 0.10 {
			t.Errorf("%s: the fleet admitted %.1f/s, want within 10%% of %v", l.name, rate, simCapacity)
		}
	}
}
