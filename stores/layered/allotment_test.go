package layered_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores"
	"github.com/sluicehq/sluice/stores/layered"
)

// allotmentStep is one request in an allotment step table: cost after advance, and
// what it must get.
type allotmentStep struct {
	advance   time.Duration
	cost      int64
	allowed   bool
	remaining int64
	source    core.Source
	remote    int64 // remote calls the request made
}

func runAllotmentSteps(t *testing.T, c *clock, s *layered.Store, calls *atomic.Int64, req core.Request, steps []allotmentStep) {
	t.Helper()
	var at time.Duration
	for i, st := range steps {
		c.Advance(st.advance)
		at += st.advance
		req.Cost = st.cost
		before := calls.Load()
		d, err := s.Apply(context.Background(), req)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		made := calls.Load() - before
		if d.Allowed != st.allowed || d.Remaining != st.remaining || d.Source != st.source || made != st.remote {
			t.Errorf("step %d: AllowN(+%v, %d) = %s after %d remote calls; want allowed %v, remaining %d, from %v after %d",
				i, at, st.cost, describe(d), made, st.allowed, st.remaining, st.source, st.remote)
		}
	}
}

// TestAllotment follows one key's allotments on a virtual clock: takes, local
// spends, the allotment doubling when an allotment is spent in time, the key
// waiting for an allotment near the limit, and shrinking when an allotment lapses.
func TestAllotment(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	// The algorithms are asked what they can do, never compared with
	// sluice's own: a stack's rule (core.Named) and an algorithm of a
	// user's own that is an Allotter are allotted as the bucket they wrap.
	for _, alg := range []core.Algorithm{
		algorithms.TokenBucket, algorithms.GCRA,
		core.Named(algorithms.TokenBucket, "rule"), core.Named(algorithms.GCRA, "rule"),
		allottingAlg{algorithms.GCRA},
	} {
		t.Run(alg.Name(), func(t *testing.T) {
			t.Parallel()
			c := newClock()
			remote, calls := counted(newMem(t, c))
			s := newLayered(t, remote, layered.Config{Now: c.Now, Allot: fixed(4), AllotmentTTL: time.Second})
			// A token every 100ms, 10 at most.
			req := core.Request{Key: "k", Terms: &core.Terms{Algorithm: alg, Limit: core.PerSecond(10)}}
			runAllotmentSteps(t, c, s, calls, req, []allotmentStep{
				{0, 1, true, 9, core.SourceAllotment, 1}, // take 4: 6 left at the remote, 3 in the allotment
				{0, 1, true, 8, core.SourceAllotment, 0},
				{0, 2, true, 6, core.SourceAllotment, 0},
				{0, 1, true, 5, core.SourceAllotment, 1}, // spent in time: the allotment would double, but is capped at 4
				{0, 3, true, 2, core.SourceAllotment, 0},
				{0, 1, true, 1, core.SourceAllotment, 2}, // the remote holds 2 of an allotment of 4: take the 2
				{0, 1, true, 0, core.SourceAllotment, 0},
				{199 * ms, 1, true, 0, core.SourceAllotment, 2}, // an allotment of 2 is denied, the 1 the remote holds taken
				{100 * ms, 1, true, 0, core.SourceAllotment, 2},
				{1 * ms, 2, false, 1, core.SourceStore, 1},      // the remote holds 1, less than the cost: the key waits for an allotment of 2
				{0, 1, false, 0, core.SourceCache, 0},           // waiting: 1 token's time
				{100 * ms, 2, true, 0, core.SourceAllotment, 1}, // an allotment of 2
				// The next allotment lapses with 3 of 4 left: the allotment
				// becomes the 1 spent of it.
				{time.Second, 1, true, 9, core.SourceAllotment, 1},
				{time.Second, 1, true, 9, core.SourceAllotment, 1}, // lapsed: an allotment of max(1, cost)
			})
		})
	}
}

// TestAllotmentWaitExtended: when a smaller take is denied because
// another instance spent meanwhile, the key waits for a whole allotment,
// and a request the remote still holds enough for is decided there; its
// cost puts the whole allotment that much further off, so the wait grows
// by the time the remote takes to refill it.
func TestAllotmentWaitExtended(t *testing.T) {
	t.Parallel()
	c := newClock()
	mem := newMem(t, c)
	// A token every 100ms, 10 at most.
	req := core.Request{Key: "k", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(10)}}
	spend := func(n int64) {
		t.Helper()
		other := req
		other.Cost = n
		if d, err := mem.Apply(context.Background(), other); err != nil || !d.Allowed {
			t.Fatalf("another instance spending %d: %s, %v", n, describe(d), err)
		}
	}
	var calls atomic.Int64
	remote := stores.Func(func(ctx context.Context, r core.Request) (core.Decision, error) {
		if calls.Add(1) == 2 {
			spend(1) // between the denied take of 4 and the take of the 2 left
		}
		return mem.Apply(ctx, r)
	})
	s := newLayered(t, remote, layered.Config{Now: c.Now, Allot: fixed(4)})
	spend(8) // the remote holds 2
	d, err := s.Apply(context.Background(), req)
	if err != nil || !d.Allowed || d.Source != core.SourceStore || calls.Load() != 3 {
		t.Fatalf("first request: %s, %v after %d remote calls; want admitted by the remote after a take of 4 and one of 2, both denied", describe(d), err, calls.Load())
	}
	// The denied take of 2 found 1: a whole allotment of 2 was one token
	// off. The request took that token, so it is two tokens off.
	d, err = s.Apply(context.Background(), req)
	if err != nil || d.Allowed || d.Source != core.SourceCache || d.RetryAfter != 200*time.Millisecond || calls.Load() != 3 {
		t.Errorf("while waiting: %s, %v after %d remote calls; want denied from the cache, to retry after 200ms", describe(d), err, calls.Load())
	}
	c.Advance(200 * time.Millisecond)
	if d, err := s.Apply(context.Background(), req); err != nil || !d.Allowed || d.Source != core.SourceAllotment {
		t.Errorf("after the wait: %s, %v; want admitted from an allotment", describe(d), err)
	}
}

// TestAllotmentFixedWindow checks that an allotment under the fixed window lapses
// when its window ends, so that no window admits more than the rate; the
// same under a stack's rule (core.Named) and under a window algorithm of
// a user's own that is an Allotter, which the store cannot recognise
// by name.
func TestAllotmentFixedWindow(t *testing.T) {
	t.Parallel()
	for _, alg := range []core.Algorithm{algorithms.FixedWindow, core.Named(algorithms.FixedWindow, "rule"), windowAlg{algorithms.FixedWindow}} {
		t.Run(alg.Name(), func(t *testing.T) {
			t.Parallel()
			testAllotmentFixedWindow(t, alg)
		})
	}
}

func testAllotmentFixedWindow(t *testing.T, alg core.Algorithm) {
	c := newClock() // on a window's boundary
	remote, calls := counted(newMem(t, c))
	s := newLayered(t, remote, layered.Config{Now: c.Now, Allot: fixed(10), AllotmentTTL: time.Hour})
	req := core.Request{Key: "k", Terms: &core.Terms{Algorithm: alg, Limit: core.PerSecond(100)}}
	runAllotmentSteps(t, c, s, calls, req, []allotmentStep{
		{900 * time.Millisecond, 1, true, 99, core.SourceAllotment, 1},
		{99 * time.Millisecond, 1, true, 98, core.SourceAllotment, 0},
		{time.Millisecond, 1, true, 99, core.SourceAllotment, 1}, // a new window: the old allotment lapsed
	})
	// Hammer a second's windows: never more than 100 in one.
	c.Advance(time.Second)
	req.Key, req.Cost = "j", 1
	for w := range 3 {
		admitted := 0
		for range 1000 {
			if d, _ := s.Apply(context.Background(), req); d.Allowed {
				admitted++
			}
			c.Advance(time.Millisecond)
		}
		if admitted > 100 || admitted < 90 {
			t.Errorf("window %d: admitted %d, want at most 100 and no fewer than 100 less an allotment", w, admitted)
		}
	}
}

// TestWindowAllotmentTTL checks that an allotment under the fixed window lives for
// WindowAllotmentTTL, not AllotmentTTL, and still lapses when its window ends;
// a token bucket's lives for AllotmentTTL.
func TestWindowAllotmentTTL(t *testing.T) {
	t.Parallel()
	c := newClock() // on a window's boundary
	remote, calls := counted(newMem(t, c))
	s := newLayered(t, remote, layered.Config{Now: c.Now, Allot: fixed(10), AllotmentTTL: time.Second, WindowAllotmentTTL: time.Hour})
	req := core.Request{Key: "k", Terms: &core.Terms{Algorithm: algorithms.FixedWindow, Limit: core.PerMinute(100)}}
	runAllotmentSteps(t, c, s, calls, req, []allotmentStep{
		{0, 1, true, 99, core.SourceAllotment, 1},
		{30 * time.Second, 1, true, 98, core.SourceAllotment, 0}, // past AllotmentTTL, within the window
		{29 * time.Second, 1, true, 97, core.SourceAllotment, 0},
		{time.Second, 1, true, 99, core.SourceAllotment, 1}, // a new window: the allotment lapsed
	})
	req = req.Clone()
	req.Algorithm = algorithms.TokenBucket
	runAllotmentSteps(t, c, s, calls, req, []allotmentStep{
		{0, 1, true, 99, core.SourceAllotment, 1},
		{2 * time.Second, 1, true, 92, core.SourceAllotment, 1}, // past AllotmentTTL: lapsed, and an allotment of the 1 spent taken
	})
}

// TestAllotmentRefund checks that a refund goes back to the key's live allotment
// when the allotment has spent at least its cost, with no remote call, and to
// the remote otherwise: a cost above what the allotment spent, or an allotment
// that lapsed.
func TestAllotmentRefund(t *testing.T) {
	t.Parallel()
	c := newClock()
	remote, calls := counted(newMem(t, c))
	s := newLayered(t, remote, layered.Config{Now: c.Now, Allot: fixed(10), AllotmentTTL: time.Second})
	req := core.Request{Key: "k", Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerMinute(100)}}
	steps := []struct {
		advance   time.Duration
		op        core.Op
		cost      int64
		remaining int64
		source    core.Source
		remote    int64
	}{
		{0, core.OpCharge, 1, 99, core.SourceAllotment, 1}, // take 10: 90 at the remote, 9 in the allotment
		{0, core.OpCharge, 3, 96, core.SourceAllotment, 0},
		{0, core.OpRefund, 2, 98, core.SourceAllotment, 0}, // the allotment spent 4: given back to it
		{0, core.OpRefund, 3, 93, core.SourceStore, 1},     // the allotment spent 2: the remote's, which knows nothing of the allotment's 8
		{0, core.OpCharge, 8, 90, core.SourceAllotment, 0}, // the allotment's 8: the take's 90 and none left
		{2 * time.Second, core.OpRefund, 1, 97, core.SourceStore, 1},
	}
	for i, st := range steps {
		c.Advance(st.advance)
		req.Op, req.Cost = st.op, st.cost
		before := calls.Load()
		d, err := s.Apply(context.Background(), req)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if made := calls.Load() - before; !d.Allowed || d.Remaining != st.remaining || d.Source != st.source || made != st.remote {
			t.Errorf("step %d: %v %d = %s after %d remote calls; want allowed, remaining %d, from %v after %d", i, st.op, st.cost, describe(d), made, st.remaining, st.source, st.remote)
		}
	}
}

// TestAllotmentNotUsed checks the requests that are never allotted: explicit
// instants, the sliding windows, costs above the allotment, allotments of 1,
// and limits whose capacity is below 2.
func TestAllotmentNotUsed(t *testing.T) {
	t.Parallel()
	c := newClock()
	remote, calls := counted(newMem(t, c))
	s := newLayered(t, remote, layered.Config{Now: c.Now, Allot: func(r core.Request) int64 {
		if strings.HasPrefix(r.Key, "one") {
			return 1
		}
		return 5
	}})
	base := core.Request{Key: "k", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerMinute(100)}}
	for _, tc := range []struct {
		name   string
		mutate func(*core.Request)
	}{
		{"explicit Now", func(r *core.Request) { r.Now = c.Now() }},
		{"sliding window counter", func(r *core.Request) { r.Algorithm = algorithms.SlidingWindowCounter }},
		{"sliding window log", func(r *core.Request) { r.Algorithm = algorithms.SlidingWindowLog }},
		{"cost above the allotment", func(r *core.Request) { r.Cost = 6 }},
		{"an allotment of 1", func(r *core.Request) { r.Key = "one" }},
		{"burst of 1", func(r *core.Request) { r.Limit = core.PerMinute(100).WithBurst(1) }},
		{"peek of a key without an allotment", func(r *core.Request) { r.Key, r.Op = "p", core.OpPeek }},
		{"cost 0", func(r *core.Request) { r.Cost = 0 }},
	} {
		req := base.Clone()
		tc.mutate(&req)
		req.Key += ":" + tc.name
		for i := range 3 {
			c.Advance(time.Second) // a token of the burst of 1
			before := calls.Load()
			d, err := s.Apply(context.Background(), req)
			if err != nil || !d.Allowed || d.Source != core.SourceStore || calls.Load() != before+1 {
				t.Errorf("%s: request %d = %s, %v; want allowed by the remote, with one call", tc.name, i, describe(d), err)
			}
		}
	}
}

// TestAllotmentPeek checks that a peek is answered from the allotment without
// spending it.
func TestAllotmentPeek(t *testing.T) {
	t.Parallel()
	c := newClock()
	remote, calls := counted(newMem(t, c))
	s := newLayered(t, remote, layered.Config{Now: c.Now, Allot: fixed(5)})
	req := core.Request{Key: "k", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.GCRA, Limit: core.PerMinute(10)}}
	ctx := context.Background()
	s.Apply(ctx, req) // take 5, spend 1
	peek := req
	peek.Op, peek.Cost = core.OpPeek, 4
	for range 3 {
		if d, err := s.Apply(ctx, peek); err != nil || !d.Allowed || d.Remaining != 5 || d.Source != core.SourceAllotment {
			t.Fatalf("peek of 4 = %s, %v; want allowed from the allotment, 5 remaining", describe(d), err)
		}
	}
	req.Cost = 4
	if d, err := s.Apply(ctx, req); err != nil || !d.Allowed || d.Remaining != 5 || d.Source != core.SourceAllotment || calls.Load() != 1 {
		t.Fatalf("request of 4 = %s, %v after %d calls; want allowed from the allotment, 5 remaining, one call in all", describe(d), err, calls.Load())
	}
}

// blockingRemote holds every call with a cost above 1 (a take) until
// release is closed, counting them.
type blockingRemote struct {
	inner   core.Store
	takes   atomic.Int64
	calls   atomic.Int64
	arrived chan struct{}
	release chan struct{}
}

func (b *blockingRemote) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	b.calls.Add(1)
	if req.Cost > 1 {
		if b.takes.Add(1) == 1 {
			close(b.arrived)
		}
		<-b.release
	}
	return b.inner.Apply(ctx, req)
}

// ApplyAll counts the call and forwards it; it holds nothing.
func (b *blockingRemote) ApplyAll(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	b.calls.Add(1)
	return b.inner.ApplyAll(ctx, reqs, out)
}

// Reset forwards to the inner store.
func (b *blockingRemote) Reset(ctx context.Context, key string, alg core.Algorithm) error {
	return b.inner.Reset(ctx, key, alg)
}

// Close closes the inner store.
func (b *blockingRemote) Close() error { return b.inner.Close() }

// TestAllotmentOneTake checks that concurrent callers of a key without an allotment
// wait for one caller's take instead of each sending one, and that a
// waiting caller returns when its context ends.
func TestAllotmentOneTake(t *testing.T) {
	t.Parallel()
	remote := &blockingRemote{inner: newMem(t, nil), arrived: make(chan struct{}), release: make(chan struct{})}
	s := newLayered(t, remote, layered.Config{Allot: fixed(100)})
	req := core.Request{Key: "k", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerMinute(1000)}}
	const goroutines = 32
	var wg sync.WaitGroup
	var allotted atomic.Int64
	wg.Go(func() {
		if d, err := s.Apply(context.Background(), req); err == nil && d.Source == core.SourceAllotment {
			allotted.Add(1)
		}
	})
	<-remote.arrived
	// A caller whose context ends while it waits returns at once.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := s.Apply(ctx, req); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waiting for a take with a 20ms deadline: %v, want context.DeadlineExceeded", err)
	}
	for range goroutines - 1 {
		wg.Go(func() {
			if d, err := s.Apply(context.Background(), req); err == nil && d.Source == core.SourceAllotment {
				allotted.Add(1)
			}
		})
	}
	time.Sleep(20 * time.Millisecond) // let them queue behind the take
	close(remote.release)
	wg.Wait()
	if n := remote.calls.Load(); n != 1 || allotted.Load() != goroutines {
		t.Errorf("%d callers sent %d remote calls and %d were allotted; want one take serving all", goroutines, n, allotted.Load())
	}
}

// TestAllotmentConcurrentSafe hammers one key from 64 goroutines with allotments
// over memstore: never more than the limit, and less only by what is left
// when the remote cannot give an allotment.
func TestAllotmentConcurrentSafe(t *testing.T) {
	t.Parallel()
	const goroutines, each, size = 64, 20, 8
	for _, alg := range []core.Algorithm{algorithms.TokenBucket, algorithms.GCRA, algorithms.FixedWindow} {
		t.Run(alg.Name(), func(t *testing.T) {
			t.Parallel()
			remote, calls := counted(newMem(t, nil))
			s := newLayered(t, remote, layered.Config{Allot: fixed(size)})
			req := core.Request{Key: "k", Cost: 1, Terms: &core.Terms{Algorithm: alg, Limit: core.PerHour(100)}}
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for range goroutines {
				wg.Go(func() {
					for range each {
						d, err := s.Apply(context.Background(), req)
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							admitted.Add(1)
						}
					}
				})
			}
			wg.Wait()
			got := admitted.Load()
			t.Logf("admitted %d of 100 in %d decisions, with %d remote calls", got, goroutines*each, calls.Load())
			if got > 100 || got < 100-(size-1) {
				t.Errorf("admitted %d, want at most 100 and at least %d", got, 100-(size-1))
			}
		})
	}
}

// plainAlg is an algorithm of a user's own that is not an Allotter: it
// decides as the algorithm it wraps, whose abilities the embedded
// interface hides.
type plainAlg struct{ core.Algorithm }

func (plainAlg) Name() string { return "user-plain" }

// allottingAlg is an algorithm of a user's own that is an Allotter, up
// to its burst; it decides as the bucket it wraps.
type allottingAlg struct{ core.Algorithm }

func (allottingAlg) Name() string { return "user-allotting" }

func (allottingAlg) MaxAllotment(l core.Limit) int64 { return l.Burst() }

func (allottingAlg) Windowed() bool { return false }

// windowAlg is a window algorithm of a user's own that is an Allotter,
// up to its rate; it decides as the window it wraps.
type windowAlg struct{ core.Algorithm }

func (windowAlg) Name() string { return "user-window" }

func (windowAlg) MaxAllotment(l core.Limit) int64 { return l.Rate() }

func (windowAlg) Windowed() bool { return true }

// TestAllotmentByAbility checks that allotting is decided by Allotter, not
// by which algorithm a request names: sluice's allottable algorithms, the
// same as a stack's rules (core.Named; they were not allotted before the
// store asked MaxAllotment), and a user's algorithm that implements
// Allotter are allotted; a user's algorithm that does not, and the
// sliding windows, are not, named or not.
func TestAllotmentByAbility(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		alg      core.Algorithm
		allotted bool
	}{
		{algorithms.TokenBucket, true},
		{core.Named(algorithms.TokenBucket, "rule"), true},
		{core.Named(algorithms.GCRA, "rule"), true},
		{core.Named(algorithms.FixedWindow, "rule"), true},
		{allottingAlg{algorithms.TokenBucket}, true},
		{core.Named(allottingAlg{algorithms.TokenBucket}, "rule"), true},
		{windowAlg{algorithms.FixedWindow}, true},
		{plainAlg{algorithms.TokenBucket}, false},
		{core.Named(plainAlg{algorithms.TokenBucket}, "rule"), false},
		{core.Named(algorithms.SlidingWindowCounter, "rule"), false},
	} {
		c := newClock()
		remote, calls := counted(newMem(t, c))
		s := newLayered(t, remote, layered.Config{Now: c.Now, Allot: fixed(5)})
		req := core.Request{Key: "k", Cost: 1, Terms: &core.Terms{Algorithm: tc.alg, Limit: core.PerMinute(100)}}
		for i := range 3 {
			before := calls.Load()
			d, err := s.Apply(context.Background(), req)
			if err != nil {
				t.Fatalf("%s: request %d: %v", tc.alg.Name(), i, err)
			}
			// Allotted: the first request takes an allotment in one call and the
			// others spend it. Not allotted: one call each.
			made := calls.Load() - before
			source, want := core.SourceStore, int64(1)
			if tc.allotted {
				source, want = core.SourceAllotment, 0
				if i == 0 {
					want = 1
				}
			}
			if !d.Allowed || d.Source != source || made != want {
				t.Errorf("%s: request %d = %s after %d remote calls; want allowed from %v after %d", tc.alg.Name(), i, describe(d), made, source, want)
			}
		}
	}
}

// TestAllotmentStackRule checks allotting through a one-rule sluice.Stack, whose
// rule's algorithm is a core.Named token bucket: the stack's requests
// are allotted like the limiter's.
func TestAllotmentStackRule(t *testing.T) {
	t.Parallel()
	c := newClock()
	remote, calls := counted(newMem(t, c))
	s := newLayered(t, remote, layered.Config{Now: c.Now, Allot: fixed(10)})
	stack, err := sluice.NewStack(s, sluice.Rule{Name: "user", Algorithm: algorithms.TokenBucket, Limit: core.PerMinute(100)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		v, err := stack.Allow(context.Background(), "alice")
		if err != nil || !v.Allowed || v.Source != core.SourceAllotment {
			t.Fatalf("Allow %d = %+v, %v; want allowed from an allotment", i, v, err)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("10 decisions of a one-rule stack made %d remote calls, want 1 (a take of 10)", n)
	}
}

// TestAllotters checks which of sluice's algorithms are Allotters, named
// for a stack's rule or not, with what largest allotment and whether windowed.
func TestAllotters(t *testing.T) {
	l := core.PerSecond(10).WithBurst(5)
	for _, tc := range []struct {
		alg      core.Algorithm
		most     int64
		windowed bool
	}{
		{algorithms.TokenBucket, 5, false},
		{algorithms.GCRA, 5, false},
		{algorithms.FixedWindow, 10, true},
		{algorithms.SlidingWindowCounter, 0, false},
		{algorithms.SlidingWindowLog, 0, false},
		{algorithms.Concurrency, 0, false},
	} {
		for _, alg := range []core.Algorithm{tc.alg, core.Named(tc.alg, "rule")} {
			b, ok := core.AlgorithmAs[layered.Allotter](alg)
			if ok != (tc.most > 0) {
				t.Errorf("%s: an Allotter = %v, want %v", alg.Name(), ok, tc.most > 0)
				continue
			}
			if ok && (b.MaxAllotment(l) != tc.most || b.Windowed() != tc.windowed) {
				t.Errorf("%s: MaxAllotment %d, Windowed %v; want %d, %v", alg.Name(), b.MaxAllotment(l), b.Windowed(), tc.most, tc.windowed)
			}
		}
	}
}
