package layered_test

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores"
	"github.com/sluicehq/sluice/stores/layered"
	"github.com/sluicehq/sluice/stores/storetest"
)

// TestDenyCache runs step tables through a layered store over a memstore,
// both on one virtual clock, and checks each decision, where it came from
// and whether the remote was called.
func TestDenyCache(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	limit := core.PerSecond(10).WithBurst(3) // a token every 100ms
	other := core.PerSecond(10).WithBurst(4)
	type step struct {
		advance time.Duration // before the step
		cost    int64
		peek    bool
		limit   core.Limit // zero: limit
		allowed bool
		retry   time.Duration
		source  core.Source
		remote  bool // the remote was called
	}
	// The numbers are the token bucket's; TestNeverAllowedFromCache
	// covers every algorithm.
	for _, alg := range []core.Algorithm{algorithms.TokenBucket} {
		t.Run(alg.Name(), func(t *testing.T) {
			t.Parallel()
			c := newClock()
			remote, calls := counted(newMem(t, c))
			s := newLayered(t, remote, layered.Config{Now: c.Now})
			steps := []step{
				{0, 3, false, core.Limit{}, true, 0, core.SourceStore, true},
				{0, 2, false, core.Limit{}, false, 200 * ms, core.SourceStore, true},
				{50 * ms, 2, false, core.Limit{}, false, 150 * ms, core.SourceCache, false},
				{0, 3, false, core.Limit{}, false, 150 * ms, core.SourceCache, false},
				{0, 2, true, core.Limit{}, false, 150 * ms, core.SourceCache, false},
				{0, 4, false, core.Limit{}, false, core.RetryNever, core.SourceStore, true},
				{0, 1, true, core.Limit{}, false, 50 * ms, core.SourceStore, true},
				{0, 0, false, core.Limit{}, true, 0, core.SourceStore, true},
				{0, 2, false, other, false, 150 * ms, core.SourceStore, true},
				{0, 2, false, core.Limit{}, false, 150 * ms, core.SourceStore, true},
				{150*ms - time.Microsecond, 2, false, core.Limit{}, false, time.Microsecond, core.SourceCache, false},
				{time.Microsecond, 2, false, core.Limit{}, true, 0, core.SourceStore, true},
				{0, 1, false, core.Limit{}, false, 100 * ms, core.SourceStore, true},
				{100 * ms, 1, false, core.Limit{}, true, 0, core.SourceStore, true},
			}
			at := time.Duration(0)
			for i, st := range steps {
				c.Advance(st.advance)
				at += st.advance
				l := st.limit
				if l == (core.Limit{}) {
					l = limit
				}
				before := calls.Load()
				d, err := s.Apply(context.Background(), core.Request{Key: "k", Cost: st.cost, Op: peekIf(st.peek), Terms: &core.Terms{Algorithm: alg, Limit: l}})
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				called := calls.Load() != before
				if d.Allowed != st.allowed || d.RetryAfter != st.retry || d.Source != st.source || called != st.remote {
					t.Errorf("step %d: AllowN(+%v, %d, peek %v, %v) = %s, remote called %v; want allowed %v, retry %v, from %v, remote called %v",
						i, at, st.cost, st.peek, l, describe(d), called, st.allowed, st.retry, st.source, st.remote)
				}
			}
		})
	}
}

// TestDenyCacheMaxDeny checks that MaxDeny bounds how long a denial is
// served, while RetryAfter still says the remote's wait.
func TestDenyCacheMaxDeny(t *testing.T) {
	t.Parallel()
	c := newClock()
	remote, calls := counted(newMem(t, c))
	s := newLayered(t, remote, layered.Config{Now: c.Now, MaxDeny: time.Second})
	req := core.Request{Key: "k", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.FixedWindow, Limit: core.PerMinute(1)}}
	ctx := context.Background()
	s.Apply(ctx, req)
	if d, err := s.Apply(ctx, req); err != nil || d.Allowed || d.Source != core.SourceStore {
		t.Fatalf("second request = %s, %v; want denied by the remote", describe(d), err)
	}
	c.Advance(time.Second - time.Microsecond)
	d, err := s.Apply(ctx, req)
	if err != nil || d.Allowed || d.Source != core.SourceCache || d.RetryAfter != time.Minute-time.Second+time.Microsecond {
		t.Fatalf("within MaxDeny = %s, %v; want a cached denial with the remote's wait, %v", describe(d), err, time.Minute-time.Second+time.Microsecond)
	}
	c.Advance(time.Microsecond)
	n := calls.Load()
	if d, err := s.Apply(ctx, req); err != nil || d.Allowed || d.Source != core.SourceStore || calls.Load() != n+1 {
		t.Fatalf("at MaxDeny = %s, %v; want the remote's denial", describe(d), err)
	}
}

// TestDenyCacheExplicitNow checks the cache at explicit instants: a
// denial answers only the same instant, cost and limit, with exactly the
// remote's decision, and the two clocks never answer for each other.
func TestDenyCacheExplicitNow(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, alg := range algorithms.All() {
		t.Run(alg.Name(), func(t *testing.T) {
			t.Parallel()
			c := newClock()
			remote, calls := counted(newMem(t, c))
			s := newLayered(t, remote, layered.Config{Now: c.Now})
			ref := newMem(t, c) // the same requests, without a cache
			ctx := context.Background()
			limit := core.PerSecond(4)
			req := core.Request{Key: "k", Cost: 4, Terms: &core.Terms{Algorithm: alg, Limit: limit, Now: t0}}
			for i, tc := range []struct {
				at     time.Duration
				cost   int64
				peek   bool
				cached bool
			}{
				{0, 4, false, false},
				{0, 1, false, false},
				{0, 1, false, true},
				{0, 1, true, true},
				{0, 2, false, false},                // another cost
				{time.Microsecond, 1, false, false}, // another instant
				{time.Microsecond, 1, false, true},
				{0, 1, false, false}, // the denial at t0 was replaced
			} {
				req.Now, req.Cost, req.Op = t0.Add(tc.at), tc.cost, peekIf(tc.peek)
				n := calls.Load()
				got, err := s.Apply(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				want, _ := ref.Apply(ctx, req)
				cached := calls.Load() == n
				if cached != tc.cached || (got.Source == core.SourceCache) != tc.cached {
					t.Errorf("call %d: from %v, remote called %v; want cached %v", i, got.Source, !cached, tc.cached)
				}
				got.Source = want.Source
				if got != want {
					t.Errorf("call %d: AllowN(t0+%v, %d) = %+v, want the remote's %+v", i, tc.at, tc.cost, got, want)
				}
			}
			// A request on the local clock is not answered by a denial at
			// an explicit instant, nor the reverse.
			local := core.Request{Key: "j", Cost: 1, Terms: &core.Terms{Algorithm: alg, Limit: core.PerMinute(1)}}
			s.Apply(ctx, local)
			s.Apply(ctx, local) // denied: cached on the local clock
			explicit := local.Clone()
			explicit.Now = c.Now()
			n := calls.Load()
			if d, err := s.Apply(ctx, explicit); err != nil || d.Source != core.SourceStore || calls.Load() != n+1 {
				t.Errorf("explicit request after a local denial = %s, %v; want the remote's", describe(d), err)
			}
			n = calls.Load()
			if d, err := s.Apply(ctx, local); err != nil || d.Source != core.SourceStore || calls.Load() != n+1 {
				t.Errorf("local request after an explicit denial replaced the local one = %s, %v; want the remote's", describe(d), err)
			}
		})
	}
}

// TestDenyCacheAlgorithmsApart checks that one key under two algorithms or
// two limits has two cache entries' worth of answers.
func TestDenyCacheAlgorithmsApart(t *testing.T) {
	t.Parallel()
	c := newClock()
	s := newLayered(t, newMem(t, c), layered.Config{Now: c.Now})
	ctx := context.Background()
	tb := core.Request{Key: "k", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerMinute(1)}}
	s.Apply(ctx, tb)
	if d, _ := s.Apply(ctx, tb); d.Allowed {
		t.Fatal("second token bucket request allowed")
	}
	gcra := tb.Clone()
	gcra.Algorithm = algorithms.GCRA
	if d, err := s.Apply(ctx, gcra); err != nil || !d.Allowed {
		t.Fatalf("gcra after a cached token bucket denial = %s, %v; want allowed", describe(d), err)
	}
	bigger := tb.Clone()
	bigger.Limit = core.PerMinute(5)
	if d, err := s.Apply(ctx, bigger); err != nil || d.Source != core.SourceStore {
		t.Fatalf("another limit after a cached denial = %s, %v; want the remote's decision", describe(d), err)
	}
}

// TestNeverAllowedFromCache checks, over random traffic on a virtual
// clock, that no decision from the cache is an admission and that every
// cached denial is one the remote would also give.
func TestNeverAllowedFromCache(t *testing.T) {
	t.Parallel()
	for _, alg := range algorithms.All() {
		t.Run(alg.Name(), func(t *testing.T) {
			t.Parallel()
			c := newClock()
			mem := newMem(t, c)
			s := newLayered(t, mem, layered.Config{Now: c.Now})
			ctx := context.Background()
			limits := []core.Limit{core.PerSecond(10).WithBurst(5), core.Per(7, 1500*time.Millisecond)}
			var cached int
			for i := range 20_000 {
				c.Advance(time.Duration(i*7919%40) * time.Millisecond / 4)
				req := core.Request{Key: "k" + strconv.Itoa(i%3), Cost: int64(i*31%9) % 7, Op: peekIf(i%11 == 0), Terms: &core.Terms{Algorithm: alg, Limit: limits[i/5000%2]}}
				d, err := s.Apply(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				if d.Source != core.SourceCache {
					continue
				}
				cached++
				peek := req
				peek.Op = core.OpPeek
				truth, _ := mem.Apply(ctx, peek)
				if d.Allowed || truth.Allowed {
					t.Fatalf("op %d: cached %s, remote %s: the cache admitted, or denied what the remote admits", i, describe(d), describe(truth))
				}
				if req.Cost == 1 || alg == algorithms.FixedWindow {
					// For the cost denied, and for a window, the wait is exact.
					if d.RetryAfter < truth.RetryAfter && req.Cost == 1 {
						t.Fatalf("op %d: cached %s, remote %s: the cached wait is shorter", i, describe(d), describe(truth))
					}
				}
			}
			t.Logf("%d of 20000 decisions from the cache", cached)
			if cached == 0 {
				t.Error("no decision came from the cache")
			}
		})
	}
}

// TestDenialMonotone checks the claim the deny cache rests on, for every
// algorithm's Go transition over random states: if cost c is denied at t
// with wait r, then every cost from c to the capacity is denied at every
// instant from t to t+r, with nothing charged in between, and charging
// more (of any cost, at any of those instants) keeps it denied.
func TestDenialMonotone(t *testing.T) {
	t.Parallel()
	limit := core.Per(7, 1500*time.Millisecond).WithBurst(5)
	for _, alg := range algorithms.All() {
		t.Run(alg.Name(), func(t *testing.T) {
			t.Parallel()
			var st core.State
			now := int64(1_000_000_000)
			capacity := limit.Burst()
			if alg != algorithms.TokenBucket && alg != algorithms.GCRA {
				capacity = limit.Rate()
			}
			checked := 0
			for i := range 5000 {
				now += int64(i*7919%400_000) + 1
				cost := int64(i)%capacity + 1
				d := alg.Transition(&st, core.Step{Now: now, Cost: cost, Limit: limit})
				if d.Allowed {
					continue
				}
				r := d.RetryAfter.Microseconds()
				for j := range 20 {
					probe := cloneState(st)
					at := now + r*int64(j)/20
					if j%2 == 1 {
						// Charge something first; it may only make matters worse.
						alg.Transition(&probe, core.Step{Now: now + r*int64(j-1)/20, Cost: 1, Limit: limit})
					}
					for c := cost; c <= capacity; c++ {
						p := cloneState(probe)
						if got := alg.Transition(&p, core.Step{Now: at, Cost: c, Limit: limit, Op: core.OpPeek}); got.Allowed {
							t.Fatalf("cost %d denied at %d with wait %dµs, but cost %d admitted at +%dµs", cost, now, r, c, at-now)
						}
					}
					checked++
				}
				// And it passes at t + r, nothing charged.
				p := cloneState(st)
				if got := alg.Transition(&p, core.Step{Now: now + r, Cost: cost, Limit: limit, Op: core.OpPeek}); !got.Allowed {
					t.Fatalf("cost %d denied at %d with wait %dµs, still denied then: %+v", cost, now, r, got)
				}
			}
			if checked == 0 {
				t.Fatal("no denial was checked")
			}
		})
	}
}

func cloneState(s core.State) core.State {
	s.Log = append([]core.LogEntry(nil), s.Log...)
	return s
}

// TestRemoteError checks that a remote failure is returned wrapped, that a
// cached denial is still served, and that nothing is allowed.
func TestRemoteError(t *testing.T) {
	t.Parallel()
	c := newClock()
	remote := storetest.NewFaulty(newMem(t, c))
	errDown := errors.New("remote down")
	s := newLayered(t, remote, layered.Config{Now: c.Now})
	ctx := context.Background()
	req := core.Request{Key: "k", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.SlidingWindowLog, Limit: core.PerSecond(1)}}
	s.Apply(ctx, req)
	s.Apply(ctx, req)
	remote.Fail(errDown)
	if d, err := s.Apply(ctx, req); err != nil || d.Allowed || d.Source != core.SourceCache {
		t.Fatalf("cached key with the remote down = %s, %v; want a cached denial", describe(d), err)
	}
	if n := len(remote.Calls()); n != 2 {
		t.Errorf("%d calls reached the remote, want 2: the cached denial makes none", n)
	}
	other := req
	other.Key = "j"
	if d, err := s.Apply(ctx, other); !errors.Is(err, errDown) || d != (core.Decision{}) {
		t.Fatalf("another key with the remote down = %s, %v; want the zero decision and the remote's error", describe(d), err)
	}
	c.Advance(time.Second)
	if _, err := s.Apply(ctx, req); !errors.Is(err, errDown) {
		t.Fatalf("the cached key once due, with the remote down: %v; want the remote's error", err)
	}
}

// closer is a remote that counts its Close calls and returns err from
// them.
type closer struct {
	core.Store
	closed atomic.Int64
	err    error
}

func (c *closer) Close() error { c.closed.Add(1); return c.err }

func TestNew(t *testing.T) {
	t.Parallel()
	mem := newMem(t, nil)
	for _, tc := range []struct {
		name   string
		remote core.Store
		cfg    layered.Config
	}{
		{"nil remote", nil, layered.Config{}},
		{"negative size", mem, layered.Config{Size: -1}},
		{"negative MaxDeny", mem, layered.Config{MaxDeny: -time.Second}},
		{"negative AllotmentTTL", mem, layered.Config{AllotmentTTL: -time.Second}},
		{"negative WindowAllotmentTTL", mem, layered.Config{WindowAllotmentTTL: -time.Second}},
	} {
		if s, err := layered.New(tc.remote, tc.cfg); !errors.Is(err, layered.ErrInvalidConfig) || s != nil {
			t.Errorf("%s: New = %v, %v; want nil and ErrInvalidConfig", tc.name, s, err)
		}
	}
	for _, tc := range []struct{ size, want int }{
		{0, layered.DefaultSize}, {1, 1}, {255, 255}, {256, 256}, {1000, 1000 / 2 * 2}, {1 << 20, 1 << 20}, {100_003, 100_003 / 16 * 16},
	} {
		s := newLayered(t, mem, layered.Config{Size: tc.size})
		if s.Size() != tc.want {
			t.Errorf("Size %d: Size() = %d, want %d", tc.size, s.Size(), tc.want)
		}
	}
}

func TestDecorator(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := newMem(t, nil)
	remote := &closer{Store: mem}
	s, err := layered.New(remote, layered.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Unwrap() != core.Store(remote) {
		t.Error("Unwrap does not return the remote")
	}
	// A remote that cannot forget says so; the error comes back wrapped.
	funcStore := newLayered(t, stores.Func(mem.Apply), layered.Config{})
	if err := funcStore.Reset(ctx, "k", algorithms.GCRA); !errors.Is(err, core.ErrUnsupported) {
		t.Errorf("Reset over a StoreFunc: %v, want ErrUnsupported", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := remote.closed.Load(); n != 1 {
		t.Errorf("the remote was closed %d times, want 1", n)
	}
	if _, err := s.Apply(ctx, core.Request{Key: "k", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.GCRA, Limit: core.PerSecond(1)}}); !errors.Is(err, core.ErrClosed) {
		t.Errorf("Apply after Close: %v, want ErrClosed", err)
	}
	// The remote's Close error is returned, wrapped, every time.
	failing := &closer{Store: mem, err: io.ErrClosedPipe}
	s, _ = layered.New(failing, layered.Config{})
	for range 2 {
		if err := s.Close(); !errors.Is(err, io.ErrClosedPipe) {
			t.Errorf("Close over a failing remote: %v, want its error", err)
		}
	}
	var _ interface{ Unwrap() core.Store } = s
}

// TestReset checks that Reset forwards to the remote and drops the key's
// cached denial and allotment, and nothing else.
func TestReset(t *testing.T) {
	t.Parallel()
	c := newClock()
	remote := storetest.NewCounter(newMem(t, c))
	s := newLayered(t, remote, layered.Config{Now: c.Now, Allot: fixed(5)})
	ctx := context.Background()
	deny := core.Request{Key: "k", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.SlidingWindowCounter, Limit: core.PerMinute(1)}}
	keep := deny
	keep.Key = "j"
	for _, r := range []core.Request{deny, deny, keep, keep} {
		s.Apply(ctx, r)
	}
	allotted := core.Request{Key: "k", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerMinute(10)}}
	if d, _ := s.Apply(ctx, allotted); d.Source != core.SourceAllotment || d.Remaining != 9 {
		t.Fatalf("allotted request = %s, want from an allotment with 9 remaining", describe(d))
	}
	for _, alg := range []core.Algorithm{algorithms.SlidingWindowCounter, algorithms.TokenBucket} {
		if err := s.Reset(ctx, "k", alg); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, resets := remote.Counts(); resets != 2 {
		t.Errorf("two Resets made %d at the remote, want 2", resets)
	}
	if d, err := s.Apply(ctx, deny); err != nil || !d.Allowed {
		t.Errorf("after Reset = %s, %v; want allowed", describe(d), err)
	}
	if d, err := s.Apply(ctx, keep); err != nil || d.Allowed || d.Source != core.SourceCache {
		t.Errorf("another key after Reset = %s, %v; want its cached denial", describe(d), err)
	}
	// The allotment's tokens went with the reset: the remote is full again.
	if d, err := s.Apply(ctx, allotted); err != nil || d.Source != core.SourceAllotment || d.Remaining != 9 {
		t.Errorf("allotted request after Reset = %s, %v; want a new allotment with 9 remaining", describe(d), err)
	}
	if err := s.Reset(ctx, "", algorithms.GCRA); !errors.Is(err, core.ErrInvalidKey) {
		t.Errorf("Reset of an empty key: %v", err)
	}
	if err := s.Reset(ctx, "k", nil); !errors.Is(err, core.ErrNoAlgorithm) {
		t.Errorf("Reset without an algorithm: %v", err)
	}
}

// TestFloodStaysBounded sends 1,000,000 distinct keys, each denied by the
// remote, through a store of the default size, and checks that the cache
// never holds more than its bound.
func TestFloodStaysBounded(t *testing.T) {
	t.Parallel()
	n := 1_000_000
	if testing.Short() {
		n = 100_000
	}
	deny := core.Decision{Limit: 1, RetryAfter: time.Minute, ResetAfter: time.Minute}
	remote := stores.Func(func(context.Context, core.Request) (core.Decision, error) { return deny, nil })
	s := newLayered(t, remote, layered.Config{})
	ctx := context.Background()
	req := core.Request{Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerMinute(1)}}
	buf := []byte("flood:")
	for i := range n {
		req.Key = string(strconv.AppendInt(buf[:6], int64(i), 10))
		if _, err := s.Apply(ctx, req); err != nil {
			t.Fatal(err)
		}
		if i%100_000 == 0 && s.Len() > s.Size() {
			t.Fatalf("after %d keys the cache holds %d, above its bound %d", i+1, s.Len(), s.Size())
		}
	}
	if s.Len() > s.Size() || s.Size() != layered.DefaultSize {
		t.Fatalf("after %d keys the cache holds %d; bound %d, want %d", n, s.Len(), s.Size(), layered.DefaultSize)
	}
	// The newest keys are still cached.
	if d, _ := s.Apply(ctx, req); d.Source != core.SourceCache {
		t.Errorf("the last key = %s, want cached", describe(d))
	}
	t.Logf("%d distinct keys: the cache holds %d (bound %d)", n, s.Len(), s.Size())
}

// TestRefundOverlappingDenial holds a denial in flight at the remote while
// a refund goes through: the denial, decided before capacity came back,
// must not be cached (review finding: it was, for its whole RetryAfter).
func TestRefundOverlappingDenial(t *testing.T) {
	t.Parallel()
	c := newClock()
	mem := newMem(t, c)
	decided, release := make(chan struct{}), make(chan struct{})
	var hold atomic.Bool
	remote := stores.Func(func(ctx context.Context, req core.Request) (core.Decision, error) {
		d, err := mem.Apply(ctx, req)
		if hold.CompareAndSwap(true, false) {
			close(decided)
			<-release
		}
		return d, err
	})
	s := newLayered(t, remote, layered.Config{Now: c.Now})
	ctx := context.Background()
	req := core.Request{Key: "k", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerHour(1)}}
	if d, _ := s.Apply(ctx, req); !d.Allowed {
		t.Fatalf("first request = %s, want allowed", describe(d))
	}
	hold.Store(true)
	denied := make(chan core.Decision)
	go func() {
		d, _ := s.Apply(ctx, req)
		denied <- d
	}()
	<-decided // the remote denied; its answer is not back yet
	refund := req
	refund.Op = core.OpRefund
	if d, err := s.Apply(ctx, refund); err != nil || !d.Allowed {
		t.Fatalf("refund = %s, %v", describe(d), err)
	}
	close(release)
	if d := <-denied; d.Allowed {
		t.Fatalf("the held request = %s, want the remote's denial", describe(d))
	}
	if d, err := s.Apply(ctx, req); err != nil || !d.Allowed || d.Source != core.SourceStore {
		t.Errorf("after the refund = %s, %v; want allowed by the remote, not a stale cached denial", describe(d), err)
	}
}

// TestConcurrencyNotCached: a concurrency denial is never cached, since a
// release (from any instance) frees a slot before the denial's wait.
func TestConcurrencyNotCached(t *testing.T) {
	t.Parallel()
	c := newClock()
	mem := newMem(t, c)
	s := newLayered(t, mem, layered.Config{Now: c.Now})
	ctx := context.Background()
	acquire := core.Request{Key: "k", Cost: 1, Lease: 1, Terms: &core.Terms{Algorithm: algorithms.Concurrency, Limit: core.Per(1, time.Minute)}}
	if d, _ := s.Apply(ctx, acquire); !d.Allowed {
		t.Fatalf("first acquisition = %s", describe(d))
	}
	other := acquire
	other.Lease = 2
	if d, _ := s.Apply(ctx, other); d.Allowed {
		t.Fatalf("second acquisition of one slot = %s, want denied", describe(d))
	}
	release := acquire
	release.Op = core.OpRefund
	if _, err := mem.Apply(ctx, release); err != nil { // released behind the cache's back, as by another instance
		t.Fatal(err)
	}
	if d, _ := s.Apply(ctx, other); !d.Allowed || d.Source != core.SourceStore {
		t.Errorf("after a release elsewhere = %s, want allowed by the remote", describe(d))
	}
}

// TestRepeatedDenialAllocatesNothing has the remote give the same denial
// again and again, as it gives the calls of one round on a hot key, each
// after the cached one has lapsed: the denial cached first stands, and
// asking costs no allocation.
func TestRepeatedDenialAllocatesNothing(t *testing.T) {
	deny := core.Decision{Limit: 1, RetryAfter: time.Microsecond, ResetAfter: time.Microsecond}
	var calls atomic.Int64
	remote := stores.Func(func(context.Context, core.Request) (core.Decision, error) {
		calls.Add(1)
		return deny, nil
	})
	now := time.Unix(1_000_000, 0)
	s := newLayered(t, remote, layered.Config{Now: func() time.Time {
		now = now.Add(time.Millisecond) // past every cached denial
		return now
	}})
	ctx := context.Background()
	req := core.Request{Key: "hot", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(1)}}
	s.Apply(ctx, req)
	allocs := testing.AllocsPerRun(100, func() {
		if d, err := s.Apply(ctx, req); err != nil || d.Allowed || d.Source == core.SourceCache {
			t.Fatalf("Apply = %+v, %v; want the remote's denial", d, err)
		}
	})
	if allocs != 0 {
		t.Errorf("a repeated denial costs %v allocations, want 0", allocs)
	}
	if n := calls.Load(); n != 102 {
		t.Errorf("remote called %d times, want 102 (every call)", n)
	}
}
