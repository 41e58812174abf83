package memstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores/storetest"
)

// colliding returns a store in which every key's hash is masked by bits,
// so that distinct keys share hashes: bits 0 makes every key collide.
func colliding(t testing.TB, cfg Config, bits uint64) *Store {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.collide = bits
	t.Cleanup(func() { s.Close() })
	return s
}

// TestConformanceAllKeysCollide runs the conformance suite on a store in
// which every key has the same hash, so every key is found past others.
func TestConformanceAllKeysCollide(t *testing.T) {
	storetest.Run(t, func(t *testing.T) core.Store {
		return colliding(t, Config{}, 0)
	})
}

// TestCollisionsMatchDistinctHashes drives two stores with the same random
// requests, resets and sweeps on one fake clock: one where keys fall into
// 4 hashes (runs of several keys), one with full hashes. Every decision
// and key count must agree.
func TestCollisionsMatchDistinctHashes(t *testing.T) {
	clock := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	cfg := Config{Shards: 1, SweepInterval: -1, Now: func() time.Time { return clock }}
	chained := colliding(t, cfg, 3)
	plain := colliding(t, cfg, ^uint64(0))
	algs := []core.Algorithm{algorithms.TokenBucket, algorithms.FixedWindow, algorithms.SlidingWindowLog}
	limit := core.PerSecond(5).WithBurst(3)
	rng := rand.New(rand.NewPCG(3, 4))
	ctx := context.Background()
	for i := range 20_000 {
		clock = clock.Add(time.Duration(rng.Int64N(int64(100 * time.Millisecond))))
		key := fmt.Sprint("k", rng.IntN(24))
		alg := algs[rng.IntN(len(algs))]
		switch op := rng.IntN(100); {
		case op < 3:
			if err := chained.Reset(ctx, key, alg); err != nil {
				t.Fatal(err)
			}
			plain.Reset(ctx, key, alg)
		case op < 6:
			chained.Sweep()
			plain.Sweep()
		default:
			req := core.Request{Key: key, Cost: rng.Int64N(3), Terms: &core.Terms{Algorithm: alg, Limit: limit}}
			switch {
			case op < 15:
				req.Op = core.OpPeek
			case op < 20:
				req.Op = core.OpRefund
			}
			got, err := chained.Apply(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := plain.Apply(ctx, req)
			if got != want {
				t.Fatalf("op %d: %s %s %+v: colliding store %+v, distinct hashes %+v", i, alg.Name(), key, req, got, want)
			}
		}
		if got, want := chained.Stats(), plain.Stats(); got != want {
			t.Fatalf("op %d: colliding store %+v, distinct hashes %+v", i, got, want)
		}
	}
}

// TestCollidingRunsUnlink checks each way an entry leaves a run of keys
// of one hash: a Reset, a sweep and an eviction, at the start, in the
// middle and at the end, with every other key of the run keeping its
// state.
func TestCollidingRunsUnlink(t *testing.T) {
	clock := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s := colliding(t, Config{MaxKeys: 5, Shards: 1, SweepInterval: -1, Now: func() time.Time { return clock }}, 0)
	ctx := context.Background()
	short, _ := sluice.NewLimiter(s, algorithms.FixedWindow, core.PerSecond(1))
	long, _ := sluice.NewLimiter(s, algorithms.FixedWindow, core.PerHour(1))
	// held reports which of the keys are still charged: a charged key is
	// denied a second request under its limit.
	held := func(lim *sluice.Limiter, keys ...string) []string {
		var out []string
		for _, k := range keys {
			if d, _ := lim.Peek(ctx, k); !d.Allowed {
				out = append(out, k)
			}
		}
		return out
	}
	for _, k := range []string{"a", "b", "c", "d"} {
		long.Allow(ctx, k) // run: a b c d
	}
	for _, k := range []string{"d", "b", "a"} { // end, middle, start
		if err := s.Reset(ctx, k, algorithms.FixedWindow); err != nil {
			t.Fatal(err)
		}
		if st := s.Stats(); st.Keys != 3 {
			t.Fatalf("after Reset(%s): %d keys, want 3", k, st.Keys)
		}
		long.Allow(ctx, k) // back, at the end
	}
	if got := held(long, "a", "b", "c", "d"); len(got) != 4 {
		t.Fatalf("after the resets %v are charged, want a b c d", got)
	}
	// Short keys between long ones: the sweep removes them from the
	// start, the middle and the end of one run.
	s.Reset(ctx, "c", algorithms.FixedWindow)
	s.Reset(ctx, "d", algorithms.FixedWindow)
	s.Reset(ctx, "a", algorithms.FixedWindow)
	s.Reset(ctx, "b", algorithms.FixedWindow)
	for _, k := range []string{"s1", "a", "s2", "b"} {
		if k[0] == 's' {
			short.Allow(ctx, k)
		} else {
			long.Allow(ctx, k)
		}
	}
	short.Allow(ctx, "s3") // run: s1 a s2 b s3
	clock = clock.Add(2 * time.Second)
	s.Sweep()
	if st := s.Stats(); st.Keys != 2 || st.Expired != 3 {
		t.Fatalf("after the sweep: %+v, want 2 keys, 3 expired", st)
	}
	if got := held(long, "a", "b"); len(got) != 2 {
		t.Fatalf("after the sweep %v are charged, want a and b", got)
	}
	// Fill the shard, then overflow it: each new key evicts a live one
	// from the single run, and the count stays at MaxKeys.
	for i := range 10 {
		long.Allow(ctx, fmt.Sprint("n", i))
		if st := s.Stats(); st.Keys > 5 {
			t.Fatalf("after n%d: %d keys, more than MaxKeys 5", i, st.Keys)
		}
	}
	st := s.Stats()
	if st.Keys != 5 || st.Evicted != 7 {
		t.Fatalf("after the overflow: %+v, want 5 keys, 7 evicted", st)
	}
	var n int
	for _, t := range s.shards[0].tables {
		for i := range t.slots {
			if !t.slots[i].free() {
				n++
			}
		}
	}
	if n != 5 {
		t.Fatalf("the tables hold %d entries, the count says 5", n)
	}
}

// TestKeysInlineAndLong checks keys on both sides of the inline bound,
// sharing one hash and one prefix: each has its own state.
func TestKeysInlineAndLong(t *testing.T) {
	s := colliding(t, Config{Shards: 1}, 0)
	lim, _ := sluice.NewLimiter(s, algorithms.TokenBucket, core.PerHour(1))
	ctx := context.Background()
	long := strings.Repeat("k", 3*inlineKey)
	var keys []string
	for _, n := range []int{1, inlineKey - 1, inlineKey, inlineKey + 1, 2 * inlineKey, 3 * inlineKey} {
		keys = append(keys, long[:n])
	}
	for _, k := range keys {
		if d, _ := lim.Allow(ctx, k); !d.Allowed {
			t.Fatalf("a %d-byte key was denied its first request: it shares another key's state", len(k))
		}
	}
	for _, k := range keys {
		if d, _ := lim.Allow(ctx, k); d.Allowed {
			t.Fatalf("a %d-byte key was allowed twice: its state was not found", len(k))
		}
	}
	if st := s.Stats(); st.Keys != len(keys) {
		t.Fatalf("%d keys held, want %d", st.Keys, len(keys))
	}
}
