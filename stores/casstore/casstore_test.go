package casstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/leakcheck"
	"github.com/sluicehq/sluice/stores/casstore"
	"github.com/sluicehq/sluice/stores/storetest"
)

// TestMain fails the package's tests if goroutines of sluice outlive them
// (package leakcheck).
func TestMain(m *testing.M) { leakcheck.Main(m) }

// newStore returns a store on be, closed when the test ends.
func newStore(t testing.TB, be casstore.Backend, cfg casstore.Config) *casstore.Store {
	t.Helper()
	s, err := casstore.New(be, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// ahead is a backend's clock 2 s ahead of the local one: far more than
// MaxLag, so that the store must learn it from the first reply, and less
// than the 10 s the conformance suite's FutureState takes the store's
// clock to be within.
func ahead() time.Time { return time.Now().Add(2 * time.Second) }

// sometimes is a conflict one Swap in five finds.
func sometimes() bool { return rand.IntN(5) == 0 }

// TestConformance runs the conformance suite on the kit over the
// in-memory backend, whose clock is 2 s ahead of the local one and
// one of whose Swaps in five finds a conflict: every guarantee of a
// store follows from the Backend contract.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) core.Store {
		be := newMem()
		be.clock, be.conflict = ahead, sometimes
		return newStore(t, be, casstore.Config{SweepInterval: -1})
	})
}

// pair is two stores on one backend, as two processes on one database
// are: each call goes to one of them at random, so that each finds the
// keys changed by the other, with stale expectations to correct.
type pair struct{ a, b *casstore.Store }

func (p pair) pick() *casstore.Store {
	if rand.IntN(2) == 0 {
		return p.a
	}
	return p.b
}

func (p pair) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	return p.pick().Apply(ctx, req)
}

func (p pair) ApplyAll(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	return p.pick().ApplyAll(ctx, reqs, out)
}

func (p pair) Reset(ctx context.Context, key string, alg core.Algorithm) error {
	return p.pick().Reset(ctx, key, alg)
}

func (p pair) Close() error { return errors.Join(p.a.Close(), p.b.Close()) }

// TestConformanceTwoProcesses runs the conformance suite on two stores
// sharing one backend, each call made by one of them at random.
func TestConformanceTwoProcesses(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) core.Store {
		be := newMem()
		be.clock = ahead
		cfg := casstore.Config{SweepInterval: -1, CacheKeys: 8} // forgetting costs a try, never a decision
		return pair{newStore(t, be, cfg), newStore(t, be, cfg)}
	})
}

// TestLag stalls the caller between deciding and the Swap, by a backend
// clock that leaps a second at every read: the store decides again, with
// the bound doubled on each try, until the instant it decides at lies
// within it, and the decision's instant is one the backend confirmed.
func TestLag(t *testing.T) {
	t.Parallel()
	var (
		mu    sync.Mutex
		clock = storetest.T0
		reads []time.Time
	)
	be := newMem()
	be.clock = func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		clock = clock.Add(time.Second)
		reads = append(reads, clock)
		return clock
	}
	s := newStore(t, be, casstore.Config{SweepInterval: -1})
	d, err := s.Apply(context.Background(), core.Request{Key: "k", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.GCRA, Limit: core.PerSecond(1)}})
	if err != nil || !d.Allowed {
		t.Fatalf("a charge = %+v, %v; want allowed", d, err)
	}
	st := s.Stats()
	last := reads[len(reads)-1]
	if st.Decided != 1 || st.Calls < 2 || int(st.Calls) != len(reads) {
		t.Errorf("Stats = %+v after %d reads of the clock; want 1 decided, every call a read, at least 2", st, len(reads))
	}
	if d.At.After(last) || d.At.Before(last.Add(-casstore.DefaultMaxLag<<(st.Calls-1))) {
		t.Errorf("decided at %v, the backend's clock at %v: outside the call's bound", d.At, last)
	}
}

// TestExplicitInstants checks that a batch of requests at instants of
// their own asks the backend no check of its clock (At 0), and that one
// on the store's clock does.
func TestExplicitInstants(t *testing.T) {
	t.Parallel()
	rec := &recorder{Backend: newMem()}
	s := newStore(t, rec, casstore.Config{SweepInterval: -1})
	ctx := context.Background()
	req := core.Request{Key: "k", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(10), Now: storetest.T0}}
	if _, err := s.Apply(ctx, req); err != nil {
		t.Fatal(err)
	}
	if rec.last.At != 0 {
		t.Errorf("a request at %v: the Swap's At = %d, want 0", req.Now, rec.last.At)
	}
	req.Now = time.Time{}
	if _, err := s.Apply(ctx, req); err != nil {
		t.Fatal(err)
	}
	if rec.last.At == 0 {
		t.Errorf("a request on the store's clock: the Swap's At = 0")
	}
}

// recorder is a backend that keeps the last batch it was given, or
// answers with reply and err if either is set.
type recorder struct {
	casstore.Backend
	mu    sync.Mutex
	last  casstore.Batch
	reply *casstore.Reply
	err   error
}

func (r *recorder) Swap(ctx context.Context, b *casstore.Batch) (casstore.Reply, error) {
	r.mu.Lock()
	r.last = *b
	reply, err := r.reply, r.err
	r.mu.Unlock()
	if reply != nil || err != nil {
		if reply == nil {
			reply = &casstore.Reply{}
		}
		return *reply, err
	}
	return r.Backend.Swap(ctx, b)
}

// TestBackendFailures checks that a backend's error reaches the caller
// as it is, and that a reply that cannot be one is an error, not a panic.
func TestBackendFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	req := core.Request{Key: "k", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(10)}}
	down := errors.New("down")
	for _, tc := range []struct {
		name  string
		reply *casstore.Reply
		err   error
		want  error
	}{
		{"error", nil, down, down},
		{"no states", &casstore.Reply{Clock: time.Now().UnixMicro()}, nil, casstore.ErrMalformed},
		{"too many states", &casstore.Reply{Clock: time.Now().UnixMicro(), Cur: make([][]byte, 3)}, nil, casstore.ErrMalformed},
		{"clock before 1970", &casstore.Reply{Clock: -1 << 62, Cur: make([][]byte, 1)}, nil, nil},
		{"never agrees", &casstore.Reply{Clock: time.Now().UnixMicro(), Cur: make([][]byte, 1)}, nil, core.ErrUnavailable},
	} {
		rec := &recorder{Backend: newMem(), reply: tc.reply, err: tc.err}
		s := newStore(t, rec, casstore.Config{SweepInterval: -1})
		_, err := s.Apply(ctx, req)
		if err == nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: %v; want %v", tc.name, err, tc.want)
		}
		var out [2]core.Decision
		two := []core.Request{req, req}
		two[1].Key = "k2"
		if err := s.ApplyAll(ctx, two, out[:]); err == nil {
			t.Errorf("%s: a batch: no error", tc.name)
		}
	}
}

// TestHealed writes bytes no state encodes into a key's state: the store
// decides as for a fresh key, says so, and replaces them.
func TestHealed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	be := newMem()
	s := newStore(t, be, casstore.Config{SweepInterval: -1})
	req := core.Request{Key: "k", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerMinute(1)}}
	if _, err := s.Apply(ctx, req); err != nil {
		t.Fatal(err)
	}
	be.mu.Lock()
	for k := range be.rows {
		be.rows[k] = memRow{state: []byte("not a state")}
	}
	be.mu.Unlock()
	s2 := newStore(t, be, casstore.Config{SweepInterval: -1}) // knows nothing of the key
	for i, want := range []bool{true, false} {
		d, err := s2.Apply(ctx, req)
		if err != nil || d.Allowed != want || d.Healed != want {
			t.Errorf("charge %d = %+v, %v; want allowed and healed %v", i, d, err, want)
		}
	}
}

// TestSweep charges keys under a limit of a second and one under a limit
// of an hour, moves the backend's clock on a minute, and sweeps: the
// short ones go, the long one stays.
func TestSweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var mu sync.Mutex
	clock := storetest.T0
	be := newMem()
	be.clock = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	s := newStore(t, be, casstore.Config{SweepInterval: -1})
	for i := range 20 {
		if _, err := s.Apply(ctx, core.Request{Key: string(rune('a' + i)), Cost: 1, Terms: &core.Terms{Algorithm: algorithms.GCRA, Limit: core.PerSecond(1)}}); err != nil {
			t.Fatal(err)
		}
	}
	long := core.Request{Key: "long", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerHour(2)}}
	if _, err := s.Apply(ctx, long); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Sweep(ctx); n != 0 || err != nil {
		t.Errorf("a sweep before any key expired = %d, %v; want 0", n, err)
	}
	mu.Lock()
	clock = clock.Add(time.Minute)
	mu.Unlock()
	long.Op = core.OpPeek // a peek shows the store the backend's new clock
	if _, err := s.Apply(ctx, long); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Sweep(ctx); n != 20 || err != nil {
		t.Errorf("a sweep a minute later = %d, %v; want 20", n, err)
	}
	if len(be.rows) != 1 {
		t.Errorf("%d states left, want the long key's", len(be.rows))
	}
}

// TestNew checks that New refuses what it cannot use.
func TestNew(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		be  casstore.Backend
		cfg casstore.Config
	}{
		{nil, casstore.Config{}},
		{newMem(), casstore.Config{MaxLag: -1}},
		{newMem(), casstore.Config{CacheKeys: -1}},
		{newMem(), casstore.Config{MaxSwaps: -1}},
	} {
		if s, err := casstore.New(tc.be, tc.cfg); err == nil {
			s.Close()
			t.Errorf("New(%v, %+v): no error", tc.be, tc.cfg)
		}
	}
}

// gated is a backend whose first Swap waits until gate is closed.
type gated struct {
	casstore.Backend
	gate  chan struct{}
	first atomic.Bool
}

func (g *gated) Swap(ctx context.Context, b *casstore.Batch) (casstore.Reply, error) {
	if g.first.CompareAndSwap(false, true) {
		<-g.gate
	}
	return g.Backend.Swap(ctx, b)
}

// TestGroups holds a first call on a key in its Swap, the one Swap its
// store may have in flight, while 199 more queue: they are decided in
// groups of at most MaxGroup, one Swap each, admitted exactly to the
// limit, each with its own decision.
func TestGroups(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		be := &gated{Backend: newMem(), gate: make(chan struct{})}
		s := newStore(t, be, casstore.Config{SweepInterval: -1, MaxSwaps: 1})
		const calls, burst = 200, 150
		req := core.Request{Key: "hot", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerHour(burst).WithBurst(burst)}}
		ds := make([]core.Decision, calls)
		var wg sync.WaitGroup
		for i := range calls {
			wg.Go(func() {
				d, err := s.Apply(context.Background(), req)
				if err != nil {
					t.Error(err)
				}
				ds[i] = d
			})
			if i == 0 {
				synctest.Wait() // the first call waits in its Swap
			}
		}
		synctest.Wait() // every other call waits for the key
		close(be.gate)
		wg.Wait()
		left := map[int64]bool{}
		admitted := 0
		for _, d := range ds {
			if d.Allowed {
				admitted++
				left[d.Remaining] = true
			}
		}
		if admitted != burst || len(left) != burst {
			t.Errorf("%d admitted with %d distinct Remaining; want %d and %d", admitted, len(left), burst, burst)
		}
		want := casstore.Stats{Decided: calls, Calls: 1 + (calls-1+casstore.MaxGroup-1)/casstore.MaxGroup}
		if st := s.Stats(); st != want {
			t.Errorf("Stats = %+v, want %+v: one Swap for the first call, then one for each group", st, want)
		}
	})
}

// TestGroupsLeaveOutCallersWhoLeft cancels a call while it waits for a
// place among the Swaps in flight: it fails with its context's error and
// is never decided.
func TestGroupsLeaveOutCallersWhoLeft(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		be := &gated{Backend: newMem(), gate: make(chan struct{})}
		s := newStore(t, be, casstore.Config{SweepInterval: -1, MaxSwaps: 1})
		req := core.Request{Key: "hot", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerHour(10)}}
		var wg sync.WaitGroup
		wg.Go(func() {
			if _, err := s.Apply(context.Background(), req); err != nil {
				t.Error(err)
			}
		})
		synctest.Wait()
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := s.Apply(ctx, req)
			errc <- err
		}()
		synctest.Wait()
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("a call cancelled while it waited: %v, want context.Canceled", err)
		}
		close(be.gate)
		wg.Wait()
		peek := req
		peek.Op = core.OpPeek
		if d, err := s.Apply(context.Background(), peek); err != nil || d.Remaining != 8 {
			t.Errorf("peek = %+v, %v; want 8 left after one charge (and this peek's token)", d, err)
		}
	})
}

// TestGroupsManyKeys holds a first call in its Swap while 99 more, each
// on a key of its own, queue: they are decided in groups of at most
// MaxGroup, one Swap each, whatever their keys.
func TestGroupsManyKeys(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		be := &gated{Backend: newMem(), gate: make(chan struct{})}
		s := newStore(t, be, casstore.Config{SweepInterval: -1, MaxSwaps: 1})
		const calls = 100
		var wg sync.WaitGroup
		for i := range calls {
			wg.Go(func() {
				req := core.Request{Key: fmt.Sprint("k", i), Cost: 1, Terms: &core.Terms{Algorithm: algorithms.GCRA, Limit: core.PerHour(1)}}
				if d, err := s.Apply(context.Background(), req); err != nil || !d.Allowed || d.Remaining != 0 {
					t.Errorf("key %d: %+v, %v; want allowed, 0 left", i, d, err)
				}
			})
			if i == 0 {
				synctest.Wait()
			}
		}
		synctest.Wait()
		close(be.gate)
		wg.Wait()
		want := casstore.Stats{Decided: calls, Calls: 1 + (calls-1+casstore.MaxGroup-1)/casstore.MaxGroup}
		if st := s.Stats(); st != want {
			t.Errorf("Stats = %+v, want %+v", st, want)
		}
	})
}
