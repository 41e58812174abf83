package adaptive_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/stores/memstore"
)

func newMemstore(t testing.TB) *memstore.Store {
	t.Helper()
	s, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestNewInvalid gives New each bad configuration in turn: each fails
// with an error wrapping ErrInvalidConfig, and no controller.
func TestNewInvalid(t *testing.T) {
	t.Parallel()
	store := newMemstore(t)
	nan, inf := math.NaN(), math.Inf(1)
	good := adaptive.AIMD()
	ok := core.PerSecond(100)
	cases := []struct {
		name    string
		initial core.Limit
		law     adaptive.Law
		opts    []adaptive.Option
	}{
		{"zero initial limit", core.Limit{}, good, nil},
		{"invalid initial limit", core.PerSecond(0), good, nil},
		{"unlimited initial limit", core.Inf, good, nil},
		{"zero law", ok, adaptive.Law{}, nil},
		{"nil law option", ok, adaptive.AIMD(nil), nil},
		{"quantile 0", ok, adaptive.AIMD(adaptive.LatencyAbove(0, time.Second)), nil},
		{"quantile above 1", ok, adaptive.AIMD(adaptive.LatencyAbove(1.5, time.Second)), nil},
		{"quantile NaN", ok, adaptive.AIMD(adaptive.LatencyAbove(nan, time.Second)), nil},
		{"zero threshold", ok, adaptive.AIMD(adaptive.LatencyAbove(0.99, 0)), nil},
		{"negative threshold", ok, adaptive.AIMD(adaptive.LatencyAbove(0.99, -time.Millisecond)), nil},
		{"zero increase", ok, adaptive.AIMD(adaptive.Increase(0)), nil},
		{"negative increase", ok, adaptive.AIMD(adaptive.Increase(-1)), nil},
		{"NaN increase", ok, adaptive.AIMD(adaptive.Increase(nan)), nil},
		{"infinite increase", ok, adaptive.AIMD(adaptive.Increase(inf)), nil},
		{"backoff 0", ok, adaptive.AIMD(adaptive.Backoff(0)), nil},
		{"backoff 1", ok, adaptive.Gradient(adaptive.Backoff(1)), nil},
		{"backoff NaN", ok, adaptive.AIMD(adaptive.Backoff(nan)), nil},
		{"error ratio 0", ok, adaptive.AIMD(adaptive.ErrorRatio(0)), nil},
		{"error ratio NaN", ok, adaptive.Gradient(adaptive.ErrorRatio(nan)), nil},
		{"tolerance below 1", ok, adaptive.Gradient(adaptive.Tolerance(0.5)), nil},
		{"tolerance NaN", ok, adaptive.Gradient(adaptive.Tolerance(nan)), nil},
		{"tolerance infinite", ok, adaptive.Gradient(adaptive.Tolerance(inf)), nil},
		{"smoothing 0", ok, adaptive.Gradient(adaptive.Smoothing(0)), nil},
		{"smoothing NaN", ok, adaptive.Gradient(adaptive.Smoothing(nan)), nil},
		{"long window 1", ok, adaptive.Gradient(adaptive.LongWindow(1)), nil},
		{"growth 0", ok, adaptive.Gradient(adaptive.Growth(0)), nil},
		{"growth NaN", ok, adaptive.Gradient(adaptive.Growth(nan)), nil},
		{"tolerance on AIMD", ok, adaptive.AIMD(adaptive.Tolerance(2)), nil},
		{"increase on gradient", ok, adaptive.Gradient(adaptive.Increase(1)), nil},
		{"threshold on gradient", ok, adaptive.Gradient(adaptive.LatencyAbove(0.99, time.Second)), nil},
		{"nil option", ok, good, []adaptive.Option{nil}},
		{"min 0", ok, good, []adaptive.Option{adaptive.WithBounds(0, 10)}},
		{"min above max", ok, good, []adaptive.Option{adaptive.WithBounds(10, 5)}},
		{"initial below bounds", ok, good, []adaptive.Option{adaptive.WithBounds(200, 300)}},
		{"initial above bounds", ok, good, []adaptive.Option{adaptive.WithBounds(1, 50)}},
		{"max too large", ok, good, []adaptive.Option{adaptive.WithBounds(1, core.MaxUnits)}},
		{"max burst too large", core.PerDay(1000).WithBurst(1000), good, []adaptive.Option{adaptive.WithBounds(1, 1_000_000)}},
		{"zero interval", ok, good, []adaptive.Option{adaptive.WithInterval(0)}},
		{"negative interval", ok, good, []adaptive.Option{adaptive.WithInterval(-time.Second)}},
		{"sub-µs interval", ok, good, []adaptive.Option{adaptive.WithInterval(time.Second + 1)}},
		{"step 0", ok, good, []adaptive.Option{adaptive.WithMaxStep(0)}},
		{"step NaN", ok, good, []adaptive.Option{adaptive.WithMaxStep(nan)}},
		{"step above 1", ok, good, []adaptive.Option{adaptive.WithMaxStep(1.5)}},
		{"nil shared store", ok, good, []adaptive.Option{adaptive.WithShared(nil, "k")}},
		{"empty shared key", ok, good, []adaptive.Option{adaptive.WithShared(store, "")}},
		{"zero TTL", ok, good, []adaptive.Option{adaptive.WithShared(store, "k"), adaptive.WithSharedTTL(0)}},
		{"nil OnChange", ok, good, []adaptive.Option{adaptive.WithOnChange(nil)}},
		{"empty rule", ok, good, []adaptive.Option{adaptive.WithRule("")}},
		{"nil match", ok, good, []adaptive.Option{adaptive.WithMatch(nil)}},
	}
	for _, c := range cases {
		ctrl, err := adaptive.New(c.initial, c.law, c.opts...)
		if !errors.Is(err, adaptive.ErrInvalidConfig) || ctrl != nil {
			t.Errorf("%s: New = %v, %v; want an error wrapping ErrInvalidConfig", c.name, ctrl, err)
			continue
		}
		t.Logf("%s: %v", c.name, err)
	}
	// The initial limit's own error stays visible.
	if _, err := adaptive.New(core.PerSecond(0), good); !errors.Is(err, core.ErrInvalidLimit) {
		t.Errorf("New with an invalid limit: %v, want it to wrap core.ErrInvalidLimit", err)
	}
}

// TestReportInvalid reports a negative latency and an unknown outcome:
// each is rejected with ErrInvalidSample and counted, and an update with
// nothing else changes nothing, locally or in the shared store.
func TestReportInvalid(t *testing.T) {
	t.Parallel()
	store := newMemstore(t)
	changed := 0
	ctrl, err := adaptive.New(core.PerSecond(100), adaptive.AIMD(), adaptive.WithShared(store, "k"),
		adaptive.WithOnChange(func(adaptive.Change) { changed++ }))
	if err != nil {
		t.Fatal(err)
	}
	if err := ctrl.Report(-time.Nanosecond, adaptive.OK); !errors.Is(err, adaptive.ErrInvalidSample) {
		t.Errorf("Report(-1ns, OK) = %v, want ErrInvalidSample", err)
	}
	if err := ctrl.Report(-time.Second, adaptive.Failed); !errors.Is(err, adaptive.ErrInvalidSample) {
		t.Errorf("Report(-1s, Failed) = %v, want ErrInvalidSample", err)
	}
	if err := ctrl.Report(time.Millisecond, adaptive.Outcome(9)); !errors.Is(err, adaptive.ErrInvalidSample) {
		t.Errorf("Report(1ms, Outcome(9)) = %v, want ErrInvalidSample", err)
	}
	if got := ctrl.Stats().Invalid; got != 3 {
		t.Errorf("Stats().Invalid = %d, want 3", got)
	}
	if err := ctrl.Update(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := ctrl.Limit(); got != core.PerSecond(100) || changed != 0 {
		t.Errorf("after invalid samples only: limit %v, %d changes; want 100 req/s, none", got, changed)
	}
	d, err := store.Apply(context.Background(), core.Request{Key: "k", Cost: 1, Op: core.OpPeek, Terms: &core.Terms{Algorithm: adaptive.SharedLimit, Limit: core.Per(10, 10*time.Second).WithBurst(1)}})
	if err != nil || d.Limit != 0 {
		t.Errorf("the shared store holds %+v (%v) after invalid samples only; want nothing", d, err)
	}
}

// TestLawSteps checks each law's step on one interval's signals, with the
// step cap and the bounds.
func TestLawSteps(t *testing.T) {
	t.Parallel()
	type sample struct {
		latency time.Duration
		o       adaptive.Outcome
		n       int
	}
	aimd := adaptive.AIMD(adaptive.LatencyAbove(0.99, 50*time.Millisecond), adaptive.Increase(10))
	cases := []struct {
		name    string
		law     adaptive.Law
		opts    []adaptive.Option
		samples []sample
		want    int64
		why     adaptive.Reason
	}{
		{"aimd healthy", aimd, nil, []sample{{10 * time.Millisecond, adaptive.OK, 100}}, 110, adaptive.ReasonHealthy},
		{"aimd slow p99", aimd, nil, []sample{{10 * time.Millisecond, adaptive.OK, 98}, {80 * time.Millisecond, adaptive.OK, 2}}, 90, adaptive.ReasonLatency},
		{"aimd slow p99.5 only", aimd, nil, []sample{{10 * time.Millisecond, adaptive.OK, 995}, {80 * time.Millisecond, adaptive.OK, 5}}, 110, adaptive.ReasonHealthy},
		{"aimd errors below the ratio", aimd, nil, []sample{{10 * time.Millisecond, adaptive.OK, 95}, {time.Second, adaptive.Failed, 5}}, 110, adaptive.ReasonHealthy},
		{"aimd errors above the ratio", aimd, nil, []sample{{10 * time.Millisecond, adaptive.OK, 85}, {time.Second, adaptive.Failed, 15}}, 85, adaptive.ReasonErrors},
		{"aimd one overload", aimd, nil, []sample{{10 * time.Millisecond, adaptive.OK, 99}, {time.Millisecond, adaptive.Overloaded, 1}}, 90, adaptive.ReasonOverload},
		{"aimd mostly failing, capped", aimd, nil, []sample{{10 * time.Millisecond, adaptive.OK, 10}, {time.Second, adaptive.Failed, 90}}, 50, adaptive.ReasonErrors},
		{"aimd mostly failing, step 0.8", aimd, []adaptive.Option{adaptive.WithMaxStep(0.8)}, []sample{{10 * time.Millisecond, adaptive.OK, 10}, {time.Second, adaptive.Failed, 90}}, 20, adaptive.ReasonErrors},
		{"aimd at the upper bound", aimd, []adaptive.Option{adaptive.WithBounds(1, 105)}, []sample{{10 * time.Millisecond, adaptive.OK, 100}}, 105, adaptive.ReasonHealthy},
		{"aimd at the lower bound", aimd, []adaptive.Option{adaptive.WithBounds(95, 200)}, []sample{{time.Second, adaptive.Overloaded, 100}}, 95, adaptive.ReasonOverload},
		{"aimd default increase", adaptive.AIMD(), nil, []sample{{time.Second, adaptive.OK, 100}}, 110, adaptive.ReasonHealthy},
		{"gradient first interval", adaptive.Gradient(), nil, []sample{{20 * time.Millisecond, adaptive.OK, 100}}, 102, adaptive.ReasonHealthy},
		{"gradient errors", adaptive.Gradient(), nil, []sample{{20 * time.Millisecond, adaptive.OK, 80}, {time.Second, adaptive.Failed, 20}}, 80, adaptive.ReasonErrors},
	}
	for _, c := range cases {
		var got adaptive.Change
		opts := append([]adaptive.Option{adaptive.WithOnChange(func(ch adaptive.Change) { got = ch })}, c.opts...)
		ctrl, err := adaptive.New(core.PerSecond(100).WithBurst(50), c.law, opts...)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range c.samples {
			for range s.n {
				if err := ctrl.Report(s.latency, s.o); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := ctrl.Update(context.Background()); err != nil {
			t.Fatal(err)
		}
		l := ctrl.Limit()
		if l.Rate() != c.want || l.Burst() != (c.want+1)/2 || got.Reason != c.why {
			t.Errorf("%s: limit %v (%v), want %d/s burst %d (%v)", c.name, l, got.Reason, c.want, (c.want+1)/2, c.why)
		}
	}
}

// TestOverride decides through policy.WithOverride(ctrl.Override): the
// controller's limit replaces the request's for the rule it adapts, and
// the other rule keeps its own.
func TestOverride(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	store, err := memstore.New(memstore.Config{SweepInterval: -1, Now: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctrl, err := adaptive.New(core.PerSecond(10), adaptive.AIMD(), adaptive.WithRule("downstream"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.New(store, policy.WithOverride(ctrl.Override))
	if err != nil {
		t.Fatal(err)
	}
	stack, err := sluice.NewStack(p,
		sluice.Rule{Name: "user", Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(100)},
		sluice.Rule{Name: "downstream", Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(1)},
	)
	if err != nil {
		t.Fatal(err)
	}
	allowed := 0
	for range 20 {
		d, err := stack.Allow(context.Background(), "u", "d")
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			allowed++
		}
	}
	// The downstream rule decides under the controller's 10/s (burst 10),
	// not its own 1/s; the user rule's 100 does not bind.
	if allowed != 10 {
		t.Errorf("allowed %d of 20 at one instant, want 10", allowed)
	}
	other := core.Request{Terms: &core.Terms{Algorithm: core.Named(algorithms.TokenBucket, "user"), Limit: core.PerSecond(100)}}
	if got := ctrl.Override(other); got != core.PerSecond(100) {
		t.Errorf("Override(user rule) = %v, want its own 100 req/s", got)
	}
	mine := core.Request{Terms: &core.Terms{Algorithm: core.Named(algorithms.TokenBucket, "downstream"), Limit: core.PerSecond(1)}}
	if got := ctrl.Override(mine); got != ctrl.Limit() {
		t.Errorf("Override(downstream rule) = %v, want %v", got, ctrl.Limit())
	}
}

// TestRunClose runs the controller on its own ticker and closes it: Run
// returns, Update and Run then fail with core.ErrClosed, and the limit
// stays readable.
func TestRunClose(t *testing.T) {
	t.Parallel()
	ctrl, err := adaptive.New(core.PerSecond(100), adaptive.AIMD(adaptive.Increase(1)), adaptive.WithInterval(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ctrl.Run(context.Background()) }()
	deadline := time.Now().Add(5 * time.Second)
	for ctrl.Stats().Intervals < 3 {
		ctrl.Report(time.Millisecond, adaptive.OK)
		if time.Now().After(deadline) {
			t.Fatal("Run made fewer than 3 updates in 5s")
		}
		time.Sleep(time.Millisecond)
	}
	if err := ctrl.Close(); err != nil {
		t.Fatal(err)
	}
	// Close has waited for Run to leave its loop: no update after it.
	// (Run's own return reaches done a moment later, on its goroutine.)
	closed := ctrl.Stats().Intervals
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run returned %v after Close, want nil", err)
		}
	case <-time.After(time.Second):
		t.Fatal("Run still running a second after Close returned")
	}
	time.Sleep(5 * time.Millisecond)
	if n := ctrl.Stats().Intervals; n != closed {
		t.Errorf("%d updates after Close returned, want none", n-closed)
	}
	if err := ctrl.Update(context.Background()); !errors.Is(err, core.ErrClosed) {
		t.Errorf("Update after Close = %v, want core.ErrClosed", err)
	}
	if err := ctrl.Run(context.Background()); !errors.Is(err, core.ErrClosed) {
		t.Errorf("Run after Close = %v, want core.ErrClosed", err)
	}
	if ctrl.Limit().Rate() <= 100 {
		t.Errorf("limit %v after healthy intervals, want above 100/s", ctrl.Limit())
	}
}

// TestReportConcurrentSafe reports from many goroutines while updates
// run: every sample is counted, in exactly one interval.
func TestReportConcurrentSafe(t *testing.T) {
	t.Parallel()
	ctrl, err := adaptive.New(core.PerSecond(1000), adaptive.AIMD(adaptive.Increase(1)))
	if err != nil {
		t.Fatal(err)
	}
	const goroutines, each = 8, 2000
	done := make(chan struct{})
	for g := range goroutines {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range each {
				o := adaptive.Outcome(i % 3)
				if err := ctrl.Report(time.Duration(g*each+i)*time.Microsecond, o); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	for finished := 0; finished < goroutines; {
		select {
		case <-done:
			finished++
		default:
			ctrl.Update(context.Background())
		}
	}
	ctrl.Update(context.Background())
	if st := ctrl.Stats(); st.Samples != goroutines*each || st.Invalid != 0 || st.Intervals < 2 {
		t.Errorf("stats %+v, want %d samples", st, goroutines*each)
	}
}
