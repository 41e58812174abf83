package policy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/memstore"
	"github.com/sluicehq/sluice/stores/redisstore"
	"github.com/sluicehq/sluice/stores/rueidisstore"
)

// keyStores are the stores the key policy is tested over: memory and
// both Redis stores on the package's shared server.
func keyStores(t *testing.T) map[string]core.Store {
	t.Helper()
	mem, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	addr := redistest.Shared(t).Addr()
	prefix := fmt.Sprintf("keys%x:", rand.Uint64())
	gc := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { gc.Close() })
	rs, err := redisstore.New(gc, redisstore.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	us, err := rueidisstore.New(rc, rueidisstore.Config{Prefix: prefix + "u:"})
	if err != nil {
		t.Fatal(err)
	}
	return map[string]core.Store{"memstore": mem, "redisstore": rs, "rueidisstore": us}
}

// calls counts the requests that reach a store.
type calls struct {
	core.Store
	n atomic.Int64
}

func (c *calls) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	c.n.Add(1)
	return c.Store.Apply(ctx, req)
}

func TestPolicySteps(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for name, store := range keyStores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			inner := &calls{Store: store}
			var shadowed []core.Decision
			var near []string
			p, err := New(inner,
				WithOverride(func(req core.Request) core.Limit {
					if strings.HasPrefix(req.Key, "pro:") {
						return core.PerSecond(100)
					}
					return req.Limit
				}),
				WithDenyList(func(key string) bool { return key == "bad:1" }),
				WithAllowList(func(key string) bool { return strings.HasPrefix(key, "internal:") }),
				WithNearLimit(0.25, func(req core.Request, _ core.Decision) { near = append(near, req.Key) }),
			)
			if err != nil {
				t.Fatal(err)
			}
			shadow, err := New(inner, WithShadow(func(_ core.Request, d core.Decision) { shadowed = append(shadowed, d) }))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			sfx := fmt.Sprintf(":%x", rand.Uint64())
			for i, st := range []struct {
				p         *Policy
				key       string
				allowed   bool
				source    core.Source
				limit     int64
				remaining int64
				calls     int64 // store calls so far
			}{
				{p, "free:1", true, core.SourceStore, 2, 1, 1},
				{p, "free:1", true, core.SourceStore, 2, 0, 2}, // near the limit: 0 < 2 × 0.25
				{p, "free:1", false, core.SourceStore, 2, 0, 3},
				{p, "pro:1", true, core.SourceStore, 100, 99, 4}, // the override's tier
				{p, "internal:health", true, core.SourceAllowList, 0, 0, 4},
				{p, "bad:1", false, core.SourceDenyList, 0, 0, 4},
				{shadow, "free:2", true, core.SourceStore, 2, 1, 5},
				{shadow, "free:2", true, core.SourceStore, 2, 0, 6},
				{shadow, "free:2", true, core.SourceShadow, 2, 0, 7}, // a denial, reported as allowed
			} {
				key := st.key
				if !strings.HasPrefix(key, "internal:") && !strings.HasPrefix(key, "bad:") {
					key += sfx
				}
				d, err := st.p.Apply(ctx, core.Request{Key: key, Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(2), Now: t0}})
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if d.Allowed != st.allowed || d.Source != st.source || inner.n.Load() != st.calls {
					t.Errorf("step %d: %s = allowed %v from %v after %d store calls; want %v from %v after %d", i, st.key, d.Allowed, d.Source, inner.n.Load(), st.allowed, st.source, st.calls)
				}
				if st.source == core.SourceStore || st.source == core.SourceShadow {
					if d.Limit != st.limit || d.Remaining != st.remaining {
						t.Errorf("step %d: %s: limit %d, remaining %d; want %d, %d", i, st.key, d.Limit, d.Remaining, st.limit, st.remaining)
					}
				}
				if st.source == core.SourceDenyList && !d.Unsatisfiable() {
					t.Errorf("step %d: a deny-listed key's decision %+v is not Unsatisfiable", i, d)
				}
				if st.source == core.SourceShadow && d.RetryAfter != 0 {
					t.Errorf("step %d: a shadow decision carries RetryAfter %v", i, d.RetryAfter)
				}
			}
			if len(near) != 1 || !strings.HasPrefix(near[0], "free:1") {
				t.Errorf("near-limit signals for %v, want one for free:1", near)
			}
			if len(shadowed) != 1 || shadowed[0].Allowed || shadowed[0].RetryAfter != 500*time.Millisecond {
				t.Errorf("shadow recorded %+v, want one denial with a 500ms wait", shadowed)
			}
		})
	}
}

// TestShadowNeverDenies sends random traffic through a shadow policy and,
// at the same instants, to an unshadowed twin key: the shadow never
// denies, records exactly the twin's denials, and charges exactly what the
// twin charges.
func TestShadowNeverDenies(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for name, store := range keyStores(t) {
		for _, alg := range algorithms.All() {
			t.Run(name+"/"+alg.Name(), func(t *testing.T) {
				t.Parallel()
				var recorded []core.Decision
				shadow, err := New(store, WithShadow(func(_ core.Request, d core.Decision) { recorded = append(recorded, d) }))
				if err != nil {
					t.Fatal(err)
				}
				seed := rand.Uint64()
				rng := rand.New(rand.NewPCG(seed, 2))
				sfx := fmt.Sprintf("%x", seed)
				ctx := context.Background()
				now := t0
				var denials []core.Decision
				for i := range 400 {
					now = now.Add(time.Duration(rng.Int64N(int64(200 * time.Millisecond))))
					req := core.Request{Cost: rng.Int64N(4) + 1, Terms: &core.Terms{Algorithm: alg, Limit: core.PerSecond(5).WithBurst(5), Now: now}}
					req.Key = "shadow:" + sfx
					got, err := shadow.Apply(ctx, req)
					if err != nil {
						t.Fatal(err)
					}
					req.Key = "twin:" + sfx
					want, err := store.Apply(ctx, req)
					if err != nil {
						t.Fatal(err)
					}
					if !got.Allowed {
						t.Fatalf("seed %d, op %d: shadow mode denied: %+v", seed, i, got)
					}
					if want.Allowed != (got.Source == core.SourceStore) || got.Remaining != want.Remaining {
						t.Fatalf("seed %d, op %d: shadow %+v, twin %+v", seed, i, got, want)
					}
					if !want.Allowed {
						denials = append(denials, want)
					}
				}
				if len(recorded) != len(denials) || len(denials) < 20 {
					t.Fatalf("seed %d: recorded %d denials, the twin had %d (want them equal, and some)", seed, len(recorded), len(denials))
				}
				for i := range denials {
					if recorded[i] != denials[i] {
						t.Fatalf("seed %d: recorded denial %d = %+v, twin's %+v", seed, i, recorded[i], denials[i])
					}
				}
			})
		}
	}
}

func TestPolicyOptions(t *testing.T) {
	mem, _ := memstore.New(memstore.Config{SweepInterval: -1})
	defer mem.Close()
	for _, opt := range []Option{nil, WithOverride(nil), WithAllowList(nil), WithDenyList(nil), WithNearLimit(0, func(core.Request, core.Decision) {}), WithNearLimit(1.5, nil), WithNearLimit(math.NaN(), nil)} {
		if _, err := New(mem, opt); err == nil {
			t.Errorf("New with a bad option succeeded")
		}
	}
	if _, err := New(nil); !errors.Is(err, core.ErrNoStore) {
		t.Errorf("New(nil) = %v", err)
	}
	// Near-limit without a function only marks decisions.
	marker, err := New(mem, WithNearLimit(0.5, nil))
	if err != nil {
		t.Fatalf("WithNearLimit(0.5, nil): %v", err)
	}
	for i, want := range []bool{false, false, true, true} { // remaining 3, 2, 1, 0 of 4
		d, err := marker.Apply(context.Background(), core.Request{Key: "near", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerMinute(4)}})
		if err != nil || d.Near != want {
			t.Errorf("admission %d = %+v, %v; want Near %v", i, d, err, want)
		}
	}
	if d, _ := marker.Apply(context.Background(), core.Request{Key: "near-peek", Cost: 4, Op: core.OpPeek, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerMinute(4)}}); !d.Allowed || d.Near {
		t.Errorf("a peek of the whole limit = %+v, want allowed and not marked near", d)
	}
	p, err := New(mem, WithAllowList(func(string) bool { return true }), WithDenyList(func(k string) bool { return k == "x" }))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Apply(context.Background(), core.Request{Key: "", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.GCRA, Limit: core.PerSecond(1)}}); !errors.Is(err, core.ErrInvalidKey) {
		t.Errorf("an allow-listed empty key = %v, want ErrInvalidKey", err)
	}
	if _, err := p.Apply(context.Background(), core.Request{Key: "x", Cost: -1, Terms: &core.Terms{Algorithm: algorithms.GCRA, Limit: core.PerSecond(1)}}); !errors.Is(err, core.ErrInvalidCost) {
		t.Errorf("a deny-listed bad cost = %v, want ErrInvalidCost", err)
	}
	if p.Unwrap() != core.Store(mem) {
		t.Errorf("Unwrap is not the inner store")
	}
	if err := p.Reset(context.Background(), "k", algorithms.GCRA); err != nil {
		t.Errorf("Reset: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// TestOverrideTerms checks the terms an override decides under: each
// request's own terms under the override's limit, built once for each
// pair of terms and limit, so that a decision under a tier the override
// gave before allocates nothing.
func TestOverrideTerms(t *testing.T) {
	mem, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	var got *core.Terms // the terms of the store's last request
	calls := 0
	rec := storeFunc{mem, func(req core.Request) { got, calls = req.Terms, calls+1 }}
	tiers := map[string]core.Limit{"pro": core.PerSecond(100), "max": core.PerSecond(1000)}
	p, err := New(rec, WithOverride(func(req core.Request) core.Limit {
		tier, _, _ := strings.Cut(req.Key, ":")
		if l, ok := tiers[tier]; ok {
			return l
		}
		return req.Limit
	}))
	if err != nil {
		t.Fatal(err)
	}
	bucket := &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(10)}
	gcra := &core.Terms{Algorithm: algorithms.GCRA, Limit: core.PerSecond(10)}
	ctx := context.Background()
	for _, tc := range []struct {
		key   string
		terms *core.Terms
		limit core.Limit
	}{
		{"free:1", bucket, core.PerSecond(10)},
		{"pro:1", bucket, core.PerSecond(100)},
		{"max:1", bucket, core.PerSecond(1000)},
		{"pro:2", gcra, core.PerSecond(100)},
		{"pro:3", bucket, core.PerSecond(100)},
	} {
		calls = 0
		d, err := p.Apply(ctx, core.Request{Key: tc.key, Cost: 1, Terms: tc.terms})
		if err != nil || !d.Allowed || calls != 1 {
			t.Fatalf("%s: %+v, %v after %d store calls", tc.key, d, err, calls)
		}
		if got.Algorithm != tc.terms.Algorithm || got.Limit != tc.limit {
			t.Errorf("%s: decided under %s at %v, want %s at %v", tc.key, got.Algorithm.Name(), got.Limit, tc.terms.Algorithm.Name(), tc.limit)
		}
		if (got == tc.terms) != (tc.limit == tc.terms.Limit) {
			t.Errorf("%s: the request's own terms = %v, want them only when the override keeps their limit", tc.key, got == tc.terms)
		}
	}
	if bucket.Limit != core.PerSecond(10) || gcra.Limit != core.PerSecond(10) {
		t.Errorf("the override changed the terms it was given: %v, %v", bucket.Limit, gcra.Limit)
	}
	req := core.Request{Key: "pro:4", Cost: 1, Terms: bucket}
	if n := testing.AllocsPerRun(1000, func() { p.Apply(ctx, req) }); n != 0 {
		t.Errorf("a decision under a tier seen before: %v allocations, want 0", n)
	}
}

// storeFunc is a store that shows each request to see before its store
// decides it.
type storeFunc struct {
	core.Store
	see func(core.Request)
}

func (s storeFunc) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	s.see(req)
	return s.Store.Apply(ctx, req)
}
