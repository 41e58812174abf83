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
	"github.com/sluicehq/sluice/stores/layered"
)

// leaseStep is one request in a lease step table: cost after advance, and
// what it must get.
type leaseStep struct {
	advance   time.Duration
	cost      int64
	allowed   bool
	remaining int64
	source    core.Source
	remote    int64 // remote calls the request made
}

func runLeaseSteps(t *testing.T, c *clock, s *layered.Store, calls *atomic.Int64, req core.Request, steps []leaseStep) {
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

// TestLease follows one key's leases on a virtual clock: takes, local
// spends, the batch doubling when a lease is spent in time, the key
// waiting for a batch near the limit, and shrinking when a lease lapses.
func TestLease(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	// The algorithms are asked what they can do, never compared with
	// sluice's own: a stack's rule (core.Named) and an algorithm of a
	// user's own that is a Batcher lease as the bucket they wrap.
	for _, alg := range []core.Algorithm{
		algorithms.TokenBucket, algorithms.GCRA,
		core.Named(algorithms.TokenBucket, "rule"), core.Named(algorithms.GCRA, "rule"),
		batchingAlg{algorithms.GCRA},
	} {
		t.Run(alg.Name(), func(t *testing.T) {
			t.Parallel()
			c := newClock()
			remote, calls := counted(newMem(t, c))
			s := newLayered(t, remote, layered.Config{Now: c.Now, Lease: fixed(4), LeaseTTL: time.Second})
			// A token every 100ms, 10 at most.
			req := core.Request{Key: "k", Algorithm: alg, Limit: core.PerSecond(10)}
			runLeaseSteps(t, c, s, calls, req, []leaseStep{
				{0, 1, true, 9, core.SourceLease, 1}, // take 4: 6 left at the remote, 3 in the lease
				{0, 1, true, 8, core.SourceLease, 0},
				{0, 2, true, 6, core.SourceLease, 0},
				{0, 1, true, 5, core.SourceLease, 1}, // spent in time: the batch would double, but is capped at 4
				{0, 3, true, 2, core.SourceLease, 0},
				{0, 1, true, 1, core.SourceLease, 2}, // the remote holds 2 of a batch of 4: take the 2
				{0, 1, true, 0, core.SourceLease, 0},
				{199 * ms, 1, true, 0, core.SourceLease, 2}, // a batch of 2 is denied, the 1 the remote holds taken
				{100 * ms, 1, true, 0, core.SourceLease, 2},
				{1 * ms, 2, false, 1, core.SourceStore, 1},  // the remote holds 1, less than the cost: the key waits for a batch of 2
				{0, 1, false, 0, core.SourceCache, 0},       // waiting: 1 token's time
				{100 * ms, 2, true, 0, core.SourceLease, 1}, // a batch of 2
				// The next lease lapses with 3 of 4 left: the batch
				// becomes the 1 spent of it.
				{time.Second, 1, true, 9, core.SourceLease, 1},
				{time.Second, 1, true, 9, core.SourceLease, 1}, // lapsed: a batch of max(1, cost)
			})
		})
	}
}

// TestLeaseFixedWindow checks that a lease under the fixed window lapses
// when its window ends, so that no window admits more than the rate; the
// same under a stack's rule (core.Named) and under a window algorithm of
// a user's own that is a Batcher, which the store cannot recognise
// by name.
func TestLeaseFixedWindow(t *testing.T) {
	t.Parallel()
	for _, alg := range []core.Algorithm{algorithms.FixedWindow, core.Named(algorithms.FixedWindow, "rule"), windowAlg{algorithms.FixedWindow}} {
		t.Run(alg.Name(), func(t *testing.T) {
			t.Parallel()
			testLeaseFixedWindow(t, alg)
		})
	}
}

func testLeaseFixedWindow(t *testing.T, alg core.Algorithm) {
	c := newClock() // on a window's boundary
	remote, calls := counted(newMem(t, c))
	s := newLayered(t, remote, layered.Config{Now: c.Now, Lease: fixed(10), LeaseTTL: time.Hour})
	req := core.Request{Key: "k", Algorithm: alg, Limit: core.PerSecond(100)}
	runLeaseSteps(t, c, s, calls, req, []leaseStep{
		{900 * time.Millisecond, 1, true, 99, core.SourceLease, 1},
		{99 * time.Millisecond, 1, true, 98, core.SourceLease, 0},
		{time.Millisecond, 1, true, 99, core.SourceLease, 1}, // a new window: the old lease lapsed
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
			t.Errorf("window %d: admitted %d, want at most 100 and no fewer than 100 less a batch", w, admitted)
		}
	}
}

// TestWindowLeaseTTL checks that a lease under the fixed window lives for
// WindowLeaseTTL, not LeaseTTL, and still lapses when its window ends;
// a token bucket's lives for LeaseTTL.
func TestWindowLeaseTTL(t *testing.T) {
	t.Parallel()
	c := newClock() // on a window's boundary
	remote, calls := counted(newMem(t, c))
	s := newLayered(t, remote, layered.Config{Now: c.Now, Lease: fixed(10), LeaseTTL: time.Second, WindowLeaseTTL: time.Hour})
	req := core.Request{Key: "k", Algorithm: algorithms.FixedWindow, Limit: core.PerMinute(100)}
	runLeaseSteps(t, c, s, calls, req, []leaseStep{
		{0, 1, true, 99, core.SourceLease, 1},
		{30 * time.Second, 1, true, 98, core.SourceLease, 0}, // past LeaseTTL, within the window
		{29 * time.Second, 1, true, 97, core.SourceLease, 0},
		{time.Second, 1, true, 99, core.SourceLease, 1}, // a new window: the lease lapsed
	})
	req.Algorithm = algorithms.TokenBucket
	runLeaseSteps(t, c, s, calls, req, []leaseStep{
		{0, 1, true, 99, core.SourceLease, 1},
		{2 * time.Second, 1, true, 92, core.SourceLease, 1}, // past LeaseTTL: lapsed, and a batch of the 1 spent taken
	})
}

// TestLeaseRefund checks that a refund goes back to the key's live lease
// when the lease has spent at least its cost, with no remote call, and to
// the remote otherwise: a cost above what the lease spent, or a lease
// that lapsed.
func TestLeaseRefund(t *testing.T) {
	t.Parallel()
	c := newClock()
	remote, calls := counted(newMem(t, c))
	s := newLayered(t, remote, layered.Config{Now: c.Now, Lease: fixed(10), LeaseTTL: time.Second})
	req := core.Request{Key: "k", Algorithm: algorithms.TokenBucket, Limit: core.PerMinute(100)}
	steps := []struct {
		advance   time.Duration
		op        core.Op
		cost      int64
		remaining int64
		source    core.Source
		remote    int64
	}{
		{0, core.OpCharge, 1, 99, core.SourceLease, 1}, // take 10: 90 at the remote, 9 in the lease
		{0, core.OpCharge, 3, 96, core.SourceLease, 0},
		{0, core.OpRefund, 2, 98, core.SourceLease, 0}, // the lease spent 4: given back to it
		{0, core.OpRefund, 3, 93, core.SourceStore, 1}, // the lease spent 2: the remote's, which knows nothing of the lease's 8
		{0, core.OpCharge, 8, 90, core.SourceLease, 0}, // the lease's 8: the take's 90 and none left
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

// TestLeaseNotUsed checks the requests that are never leased: explicit
// instants, the sliding windows, costs above the batch, batches of 1,
// and limits whose capacity is below 2.
func TestLeaseNotUsed(t *testing.T) {
	t.Parallel()
	c := newClock()
	remote, calls := counted(newMem(t, c))
	s := newLayered(t, remote, layered.Config{Now: c.Now, Lease: func(r core.Request) int64 {
		if strings.HasPrefix(r.Key, "one") {
			return 1
		}
		return 5
	}})
	base := core.Request{Key: "k", Algorithm: algorithms.TokenBucket, Limit: core.PerMinute(100), Cost: 1}
	for _, tc := range []struct {
		name   string
		mutate func(*core.Request)
	}{
		{"explicit Now", func(r *core.Request) { r.Now = c.Now() }},
		{"sliding window counter", func(r *core.Request) { r.Algorithm = algorithms.SlidingWindowCounter }},
		{"sliding window log", func(r *core.Request) { r.Algorithm = algorithms.SlidingWindowLog }},
		{"cost above the batch", func(r *core.Request) { r.Cost = 6 }},
		{"batch of 1", func(r *core.Request) { r.Key = "one" }},
		{"burst of 1", func(r *core.Request) { r.Limit = core.PerMinute(100).WithBurst(1) }},
		{"peek of an unleased key", func(r *core.Request) { r.Key, r.Op = "p", core.OpPeek }},
		{"cost 0", func(r *core.Request) { r.Cost = 0 }},
	} {
		req := base
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

// TestLeasePeek checks that a peek is answered from the lease without
// spending it.
func TestLeasePeek(t *testing.T) {
	t.Parallel()
	c := newClock()
	remote, calls := counted(newMem(t, c))
	s := newLayered(t, remote, layered.Config{Now: c.Now, Lease: fixed(5)})
	req := core.Request{Key: "k", Algorithm: algorithms.GCRA, Limit: core.PerMinute(10), Cost: 1}
	ctx := context.Background()
	s.Apply(ctx, req) // take 5, spend 1
	peek := req
	peek.Op, peek.Cost = core.OpPeek, 4
	for range 3 {
		if d, err := s.Apply(ctx, peek); err != nil || !d.Allowed || d.Remaining != 5 || d.Source != core.SourceLease {
			t.Fatalf("peek of 4 = %s, %v; want allowed from the lease, 5 remaining", describe(d), err)
		}
	}
	req.Cost = 4
	if d, err := s.Apply(ctx, req); err != nil || !d.Allowed || d.Remaining != 5 || d.Source != core.SourceLease || calls.Load() != 1 {
		t.Fatalf("request of 4 = %s, %v after %d calls; want allowed from the lease, 5 remaining, one call in all", describe(d), err, calls.Load())
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

// TestLeaseOneTake checks that concurrent callers of a key without a lease
// wait for one caller's take instead of each sending one, and that a
// waiting caller returns when its context ends.
func TestLeaseOneTake(t *testing.T) {
	t.Parallel()
	remote := &blockingRemote{inner: newMem(t, nil), arrived: make(chan struct{}), release: make(chan struct{})}
	s := newLayered(t, remote, layered.Config{Lease: fixed(100)})
	req := core.Request{Key: "k", Algorithm: algorithms.TokenBucket, Limit: core.PerMinute(1000), Cost: 1}
	const goroutines = 32
	var wg sync.WaitGroup
	var leased atomic.Int64
	wg.Go(func() {
		if d, err := s.Apply(context.Background(), req); err == nil && d.Source == core.SourceLease {
			leased.Add(1)
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
			if d, err := s.Apply(context.Background(), req); err == nil && d.Source == core.SourceLease {
				leased.Add(1)
			}
		})
	}
	time.Sleep(20 * time.Millisecond) // let them queue behind the take
	close(remote.release)
	wg.Wait()
	if n := remote.calls.Load(); n != 1 || leased.Load() != goroutines {
		t.Errorf("%d callers sent %d remote calls and %d were leased; want one take serving all", goroutines, n, leased.Load())
	}
}

// TestLeaseConcurrentSafe hammers one key from 64 goroutines with leases
// over memstore: never more than the limit, and less only by what is left
// when the remote cannot give a batch.
func TestLeaseConcurrentSafe(t *testing.T) {
	t.Parallel()
	const goroutines, each, batch = 64, 20, 8
	for _, alg := range []core.Algorithm{algorithms.TokenBucket, algorithms.GCRA, algorithms.FixedWindow} {
		t.Run(alg.Name(), func(t *testing.T) {
			t.Parallel()
			remote, calls := counted(newMem(t, nil))
			s := newLayered(t, remote, layered.Config{Lease: fixed(batch)})
			req := core.Request{Key: "k", Algorithm: alg, Limit: core.PerHour(100), Cost: 1}
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
			if got > 100 || got < 100-(batch-1) {
				t.Errorf("admitted %d, want at most 100 and at least %d", got, 100-(batch-1))
			}
		})
	}
}

// plainAlg is an algorithm of a user's own that is not a Batcher: it
// decides as the algorithm it wraps, whose abilities the embedded
// interface hides.
type plainAlg struct{ core.Algorithm }

func (plainAlg) Name() string { return "user-plain" }

// batchingAlg is an algorithm of a user's own that is a Batcher, up
// to its burst; it decides as the bucket it wraps.
type batchingAlg struct{ core.Algorithm }

func (batchingAlg) Name() string { return "user-batching" }

func (batchingAlg) MaxBatch(l core.Limit) int64 { return l.Burst() }

func (batchingAlg) Windowed() bool { return false }

// windowAlg is a window algorithm of a user's own that is a Batcher,
// up to its rate; it decides as the window it wraps.
type windowAlg struct{ core.Algorithm }

func (windowAlg) Name() string { return "user-window" }

func (windowAlg) MaxBatch(l core.Limit) int64 { return l.Rate() }

func (windowAlg) Windowed() bool { return true }

// TestLeaseByAbility checks that leasing is decided by Batcher, not
// by which algorithm a request names: sluice's batchable algorithms, the
// same as a stack's rules (core.Named; they were not leased before the
// store asked MaxBatch), and a user's algorithm that implements
// Batcher are leased; a user's algorithm that does not, and the
// sliding windows, are not, named or not.
func TestLeaseByAbility(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		alg    core.Algorithm
		leased bool
	}{
		{algorithms.TokenBucket, true},
		{core.Named(algorithms.TokenBucket, "rule"), true},
		{core.Named(algorithms.GCRA, "rule"), true},
		{core.Named(algorithms.FixedWindow, "rule"), true},
		{batchingAlg{algorithms.TokenBucket}, true},
		{core.Named(batchingAlg{algorithms.TokenBucket}, "rule"), true},
		{windowAlg{algorithms.FixedWindow}, true},
		{plainAlg{algorithms.TokenBucket}, false},
		{core.Named(plainAlg{algorithms.TokenBucket}, "rule"), false},
		{core.Named(algorithms.SlidingWindowCounter, "rule"), false},
	} {
		c := newClock()
		remote, calls := counted(newMem(t, c))
		s := newLayered(t, remote, layered.Config{Now: c.Now, Lease: fixed(5)})
		req := core.Request{Key: "k", Algorithm: tc.alg, Limit: core.PerMinute(100), Cost: 1}
		for i := range 3 {
			before := calls.Load()
			d, err := s.Apply(context.Background(), req)
			if err != nil {
				t.Fatalf("%s: request %d: %v", tc.alg.Name(), i, err)
			}
			// Leased: the first request takes a batch in one call and the
			// others spend it. Not leased: one call each.
			made := calls.Load() - before
			source, want := core.SourceStore, int64(1)
			if tc.leased {
				source, want = core.SourceLease, 0
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

// TestLeaseStackRule checks leasing through a one-rule sluice.Stack, whose
// rule's algorithm is a core.Named token bucket: the stack's requests
// are leased like the limiter's.
func TestLeaseStackRule(t *testing.T) {
	t.Parallel()
	c := newClock()
	remote, calls := counted(newMem(t, c))
	s := newLayered(t, remote, layered.Config{Now: c.Now, Lease: fixed(10)})
	stack, err := sluice.NewStack(s, sluice.Rule{Name: "user", Algorithm: algorithms.TokenBucket, Limit: core.PerMinute(100)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		v, err := stack.Allow(context.Background(), "alice")
		if err != nil || !v.Allowed || v.Source != core.SourceLease {
			t.Fatalf("Allow %d = %+v, %v; want allowed from a lease", i, v, err)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("10 decisions of a one-rule stack made %d remote calls, want 1 (a take of 10)", n)
	}
}

// TestBatchers checks which of sluice's algorithms are Batchers, named
// for a stack's rule or not, with what batch and whether windowed.
func TestBatchers(t *testing.T) {
	l := core.PerSecond(10).WithBurst(5)
	for _, tc := range []struct {
		alg      core.Algorithm
		batch    int64
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
			b, ok := core.AlgorithmAs[layered.Batcher](alg)
			if ok != (tc.batch > 0) {
				t.Errorf("%s: a Batcher = %v, want %v", alg.Name(), ok, tc.batch > 0)
				continue
			}
			if ok && (b.MaxBatch(l) != tc.batch || b.Windowed() != tc.windowed) {
				t.Errorf("%s: MaxBatch %d, Windowed %v; want %d, %v", alg.Name(), b.MaxBatch(l), b.Windowed(), tc.batch, tc.windowed)
			}
		}
	}
}
