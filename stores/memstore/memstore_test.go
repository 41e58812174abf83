package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores"
	"github.com/sluicehq/sluice/stores/memstore"
	"github.com/sluicehq/sluice/stores/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) core.Store {
		s, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, cfg := range []memstore.Config{{MaxKeys: -1}, {Shards: -4}, {Shards: math.MaxInt}} {
		if s, err := memstore.New(cfg); err == nil {
			s.Close()
			t.Errorf("New(%+v) succeeded, want an error", cfg)
		}
	}
}

// TestKeyFlood sends 2M distinct keys through a store bounded at 100,000:
// it must never hold more, and must count what it evicted.
func TestKeyFlood(t *testing.T) {
	const flood, maxKeys = 2_000_000, 100_000
	n := flood
	if testing.Short() {
		n /= 10
	}
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	rssBefore, rssErr := rss()
	s, err := memstore.New(memstore.Config{MaxKeys: maxKeys})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	lim, err := sluice.NewLimiter(s, algorithms.TokenBucket, core.PerMinute(10))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	buf := make([]byte, 0, 16)
	for i := range n {
		buf = strconv.AppendInt(buf[:0], int64(i), 36)
		if d, err := lim.Allow(ctx, string(buf)); err != nil || !d.Allowed {
			t.Fatalf("key %d: %+v, %v; want a fresh key allowed", i, d, err)
		}
		if i%100_000 == 0 {
			if st := s.Stats(); st.Keys > maxKeys {
				t.Fatalf("after %d keys the store holds %d, more than MaxKeys %d", i+1, st.Keys, maxKeys)
			}
		}
	}
	st := s.Stats()
	t.Logf("after %d distinct keys: %+v", n, st)
	if st.Keys > maxKeys || st.MaxKeys > maxKeys {
		t.Fatalf("after the flood: %+v, want at most %d keys", st, maxKeys)
	}
	if st.Keys < maxKeys*9/10 {
		t.Errorf("after the flood the store holds %d keys, want close to MaxKeys %d", st.Keys, maxKeys)
	}
	if got, want := st.Evicted+st.Expired, uint64(n-st.Keys); got != want {
		t.Errorf("evicted+expired = %d, want %d (every key that is gone)", got, want)
	}
	// What the store holds on the heap: an entry is 64 bytes, in tables
	// at most three quarters full that double as they grow, so at most
	// 171 bytes a key, and keys this short are held in the entry.
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("the heap grew by %d bytes: %d a key held", held, held/int64(max(st.Keys, 1)))
	if held > 256*maxKeys {
		t.Errorf("the heap grew by %d bytes for %d keys held, want at most 256 a key", held, st.Keys)
	}
	// R-22's bound on the process: its resident memory grew by at most
	// 256 bytes a key of MaxKeys and 20 MiB, the garbage the flood made
	// and the collector's headroom included. Under the race detector
	// RSS counts its shadow memory too, so the bound is checked only
	// without it (make test runs this test so as well).
	switch rssAfter, err := rss(); {
	case rssErr != nil || err != nil:
		t.Logf("RSS not measured: %v", errors.Join(rssErr, err))
	case raceDetector:
		t.Logf("RSS grew by %d bytes, with the race detector's shadow memory: not bounded", rssAfter-rssBefore)
	default:
		grew := rssAfter - rssBefore
		t.Logf("RSS grew by %d bytes (%.1f MiB): %d a key of MaxKeys", grew, float64(grew)/(1<<20), grew/maxKeys)
		if bound := int64(256*maxKeys + 20<<20); grew > bound {
			t.Errorf("RSS grew by %d bytes, want at most %d (256 a key of MaxKeys and 20 MiB)", grew, bound)
		}
	}
	runtime.KeepAlive(s)
}

// rss returns the process's resident memory, from /proc/self/status.
func rss() (int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmRSS in /proc/self/status")
}

// TestEvictionPrefersExpired fills a store, lets some keys expire and checks
// that new keys replace the expired ones, not live ones.
func TestEvictionPrefersExpired(t *testing.T) {
	clock := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s, err := memstore.New(memstore.Config{MaxKeys: 8, Shards: 1, SweepInterval: -1, Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	short, _ := sluice.NewLimiter(s, algorithms.FixedWindow, core.PerSecond(1))
	long, _ := sluice.NewLimiter(s, algorithms.FixedWindow, core.PerHour(1))
	for i := range 4 {
		short.Allow(ctx, fmt.Sprint("short", i))
		long.Allow(ctx, fmt.Sprint("long", i))
	}
	clock = clock.Add(2 * time.Second) // the short keys expire
	for i := range 4 {
		short.Allow(ctx, fmt.Sprint("new", i))
	}
	st := s.Stats()
	if st.Keys != 8 || st.Expired != 4 || st.Evicted != 0 {
		t.Fatalf("stats = %+v, want 8 keys, 4 expired, 0 evicted", st)
	}
	for i := range 4 {
		if d, _ := long.Allow(ctx, fmt.Sprint("long", i)); d.Allowed {
			t.Errorf("long%d was forgotten: a live key was evicted while expired ones remained", i)
		}
	}
}

// TestSweeper checks, on a fake clock, that the sweeper removes expired keys
// on its interval and that Close stops it.
func TestSweeper(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := memstore.New(memstore.Config{SweepInterval: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		lim, _ := sluice.NewLimiter(s, algorithms.GCRA, core.Every(100*time.Millisecond).WithBurst(5))
		ctx := context.Background()
		for i := range 10 {
			lim.AllowN(ctx, fmt.Sprint("k", i), 5)
		}
		// The horizon is 500ms: the first sweep at 1s removes them all.
		time.Sleep(999 * time.Millisecond)
		synctest.Wait()
		if st := s.Stats(); st.Keys != 10 {
			t.Fatalf("before the first sweep: %d keys, want 10", st.Keys)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if st := s.Stats(); st.Keys != 0 || st.Expired != 10 {
			t.Fatalf("after the first sweep: %+v, want 0 keys, 10 expired", st)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		// synctest.Test fails if the sweeper goroutine outlives Close.
	})
}

// TestForgettingIsExact checks that a key dropped after its horizon decides
// as it would have: the horizon is exact.
func TestForgettingIsExact(t *testing.T) {
	for _, alg := range algorithms.All() {
		t.Run(alg.Name(), func(t *testing.T) {
			clock := time.Date(2030, 1, 1, 0, 0, 0, 123_456_000, time.UTC)
			s, _ := memstore.New(memstore.Config{SweepInterval: -1, Now: func() time.Time { return clock }})
			defer s.Close()
			limit := core.Per(7, 3*time.Second).WithBurst(4)
			kept := new(core.State)
			ctx := context.Background()
			req := core.Request{Key: "k", Cost: 3, Terms: &core.Terms{Algorithm: alg, Limit: limit}}
			d, _ := s.Apply(ctx, req)
			core.Run(kept, &req, clock.UnixMicro())
			clock = clock.Add(alg.Horizon(limit))
			s.Sweep()
			if st := s.Stats(); st.Keys != 0 {
				t.Fatalf("after the horizon the key is still held: %+v", st)
			}
			req.Cost = 4
			got, _ := s.Apply(ctx, req)
			want := core.Run(kept, &req, clock.UnixMicro())
			if got != want {
				t.Fatalf("after forgetting: %+v; the kept state decides %+v (first decision %+v)", got, want, d)
			}
		})
	}
}

func TestStoreFuncAndLimiterReset(t *testing.T) {
	s, _ := memstore.New(memstore.Config{})
	defer s.Close()
	ctx := context.Background()
	lim, _ := sluice.NewLimiter(s, algorithms.SlidingWindowLog, core.PerMinute(1))
	if d, _ := lim.Allow(ctx, "k"); !d.Allowed {
		t.Fatal("first request denied")
	}
	if d, _ := lim.Allow(ctx, "k"); d.Allowed {
		t.Fatal("second request allowed")
	}
	if err := lim.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if d, _ := lim.Allow(ctx, "k"); !d.Allowed {
		t.Fatal("request after Reset denied")
	}
	// A store without Reset: the limiter says so.
	plain, _ := sluice.NewLimiter(stores.Func(s.Apply), algorithms.GCRA, core.PerMinute(1))
	if err := plain.Reset(ctx, "k"); !errors.Is(err, core.ErrUnsupported) {
		t.Fatalf("Reset through a StoreFunc: %v, want %v", err, core.ErrUnsupported)
	}
}

// TestClockBeforeEpoch checks that a store whose clock reads before 1970
// refuses to decide instead of deciding wrongly.
func TestClockBeforeEpoch(t *testing.T) {
	s, _ := memstore.New(memstore.Config{Now: func() time.Time { return time.Unix(-5, 0) }})
	defer s.Close()
	lim, _ := sluice.NewLimiter(s, algorithms.FixedWindow, core.PerSecond(1))
	_, err := lim.Allow(context.Background(), "k")
	if err == nil || errors.Is(err, core.ErrInvalidTime) {
		t.Fatalf("Allow on a clock before 1970: err = %v, want a store failure, not bad input", err)
	}
}

// TestKeysAreCopied checks that the store keeps its own copy of a key, not
// the caller's backing array.
func TestKeysAreCopied(t *testing.T) {
	s, _ := memstore.New(memstore.Config{})
	defer s.Close()
	lim, _ := sluice.NewLimiter(s, algorithms.TokenBucket, core.PerHour(1))
	ctx := context.Background()
	buf := []byte("client-a")
	key := unsafe.String(&buf[0], len(buf)) // a key that shares the caller's buffer
	if d, _ := lim.Allow(ctx, key); !d.Allowed {
		t.Fatal("first request denied")
	}
	copy(buf, "client-b") // the caller reuses its buffer
	if d, _ := lim.Allow(ctx, "client-a"); d.Allowed {
		t.Fatal("client-a was allowed twice: the store kept the caller's buffer as its key")
	}
	if d, _ := lim.Allow(ctx, "client-b"); !d.Allowed {
		t.Fatal("client-b was denied: it shares state with client-a")
	}
}

// TestSmallStoreKeepsItsBound checks that a small MaxKeys is not lost to
// rounding across shards.
func TestSmallStoreKeepsItsBound(t *testing.T) {
	for _, max := range []int{1, 63, 100, 1000, 5000} {
		s, _ := memstore.New(memstore.Config{MaxKeys: max})
		st := s.Stats()
		s.Close()
		if st.MaxKeys > max || st.MaxKeys < max*63/64 {
			t.Errorf("MaxKeys %d: the store holds at most %d keys (%d a shard)", max, st.MaxKeys, st.ShardKeys)
		}
	}
}

// TestForgettingIsExactUnderChanges drives a store, sweeping after every
// call, with limits that change and a clock that jumps ahead, and wants
// every decision to equal the algorithm's on a state kept forever: the
// store forgets only what the algorithm would. (A clock that steps back
// past a state's Expires after the store dropped the state finds the key
// fresh, where a kept state would be live again; the default clock never
// steps back.)
func TestForgettingIsExactUnderChanges(t *testing.T) {
	limits := []core.Limit{
		core.PerSecond(1).WithBurst(5), core.PerSecond(1).WithBurst(100), core.PerSecond(10),
		core.Per(3, 2*time.Second), core.PerMinute(20),
	}
	for _, alg := range algorithms.All() {
		t.Run(alg.Name(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, uint64(len(alg.Name()))))
			clock := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			s, _ := memstore.New(memstore.Config{SweepInterval: -1, Now: func() time.Time { return clock }})
			defer s.Close()
			kept := map[string]*core.State{"a": {}, "b": {}}
			for i := range 5000 {
				switch k := rng.IntN(20); {
				case k < 4:
					clock = clock.Add(time.Duration(rng.Int64N(int64(20 * time.Second))))
				default:
					clock = clock.Add(time.Duration(rng.Int64N(int64(300 * time.Millisecond))))
				}
				clock = clock.Truncate(time.Microsecond)
				key := []string{"a", "b"}[rng.IntN(2)]
				req := core.Request{Key: key, Cost: rng.Int64N(8), Terms: &core.Terms{Algorithm: alg, Limit: limits[rng.IntN(len(limits))]}}
				got, err := s.Apply(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				want := core.Run(kept[key], &req, clock.UnixMicro())
				if got != want {
					t.Fatalf("op %d: %s cost %d under %v: store %+v, kept state %+v", i, key, req.Cost, req.Limit, got, want)
				}
				s.Sweep()
			}
		})
	}
}

// panicky is an algorithm whose transition panics.
type panicky struct{ core.Algorithm }

func (panicky) Name() string { return "panicky" }

func (panicky) Transition(*core.State, core.Step) core.Decision {
	panic("panicky: transition")
}

// TestPanickingAlgorithmReleasesShard checks that an algorithm's panic,
// recovered by the caller, leaves the store usable and closable.
func TestPanickingAlgorithmReleasesShard(t *testing.T) {
	s, _ := memstore.New(memstore.Config{Shards: 1})
	ctx := context.Background()
	func() {
		defer func() { recover() }()
		s.Apply(ctx, core.Request{Key: "k", Cost: 1, Terms: &core.Terms{Algorithm: panicky{algorithms.TokenBucket}, Limit: core.PerSecond(1)}})
		t.Fatal("the algorithm did not panic")
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		lim, _ := sluice.NewLimiter(s, algorithms.TokenBucket, core.PerSecond(1))
		lim.Allow(ctx, "other")
		s.Close()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the shard stayed locked after the panic")
	}
}
