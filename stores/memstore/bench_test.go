package memstore_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/stores/memstore"
)

// manyKeys is the key count of the many-keys benchmarks.
const manyKeys = 1_000_000

var benchKeys = func() []string {
	keys := make([]string, manyKeys)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	return keys
}()

// BenchmarkAllow measures Limiter.Allow on the memory store: serial and
// parallel, on one hot key and on 1M distinct keys, for every algorithm.
// The limit is high enough that most decisions are admissions, which write.
func BenchmarkAllow(b *testing.B) {
	for _, alg := range algorithms.All() {
		limit := sluice.PerSecond(1_000_000_000)
		if alg == algorithms.SlidingWindowLog {
			limit = sluice.PerSecond(algorithms.MaxLogRate)
		}
		b.Run(alg.Name(), func(b *testing.B) {
			b.Run("serial/hot", func(b *testing.B) { benchAllow(b, alg, limit, 1, false) })
			b.Run("serial/1M", func(b *testing.B) { benchAllow(b, alg, limit, manyKeys, false) })
			b.Run("parallel/hot", func(b *testing.B) { benchAllow(b, alg, limit, 1, true) })
			b.Run("parallel/1M", func(b *testing.B) { benchAllow(b, alg, limit, manyKeys, true) })
		})
	}
}

func benchAllow(b *testing.B, alg sluice.Algorithm, limit sluice.Limit, keys int, parallel bool) {
	s, err := memstore.New(memstore.Config{MaxKeys: 2 * manyKeys})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	lim, err := sluice.NewLimiter(s, alg, limit)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	// Warm every key, so that the measured calls find their state.
	for _, k := range benchKeys[:keys] {
		lim.Allow(ctx, k)
	}
	b.ReportAllocs()
	b.ResetTimer()
	if !parallel {
		i := 0
		for b.Loop() {
			lim.Allow(ctx, benchKeys[i])
			if i++; i == keys {
				i = 0
			}
		}
		return
	}
	var next atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		// Each goroutine walks the keys from its own starting point.
		i := int(next.Add(manyKeys/64)) % keys
		for pb.Next() {
			lim.Allow(ctx, benchKeys[i])
			if i++; i == keys {
				i = 0
			}
		}
	})
}

// BenchmarkStackAllow measures sluice.Stack.Allow on the memory store: a
// stack of three rules (a token bucket per user over 10,000 users, GCRA
// per tenant over 10, a fixed window for all), serial and parallel, every
// decision admitted. A decision decides the three rules in one ApplyAll.
// Under one-rule, a stack of the token bucket alone decides one hot key
// serially, as the middlewares' stacks of one rule do: against
// BenchmarkAllow/token-bucket/serial/hot, what the stack adds to a
// Limiter.
func BenchmarkStackAllow(b *testing.B) {
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	st, err := sluice.NewStack(s,
		sluice.Rule{Name: "user", Algorithm: algorithms.TokenBucket, Limit: sluice.PerSecond(1_000_000_000)},
		sluice.Rule{Name: "tenant", Algorithm: algorithms.GCRA, Limit: sluice.PerSecond(1_000_000_000)},
		sluice.Rule{Name: "global", Algorithm: algorithms.FixedWindow, Limit: sluice.PerSecond(1_000_000_000)},
	)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	keys := func(i int) []string {
		return []string{benchKeys[i%10_000], "tenant:" + strconv.Itoa(i%10), "all"}
	}
	sets := make([][]string, 10_000)
	for i := range sets {
		sets[i] = keys(i)
		st.Allow(ctx, sets[i]...)
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if v, _ := st.Allow(ctx, sets[i%len(sets)]...); !v.Allowed {
				b.Fatal("denied: the benchmark measures admissions")
			}
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		var next atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			i := int(next.Add(1)) * 7919
			for pb.Next() {
				st.Allow(ctx, sets[i%len(sets)]...)
				i++
			}
		})
	})
	one, err := sluice.NewStack(s, sluice.Rule{Name: "user", Algorithm: algorithms.TokenBucket, Limit: sluice.PerSecond(1_000_000_000)})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("one-rule", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if v, _ := one.Allow(ctx, "alice"); !v.Allowed {
				b.Fatal("denied: the benchmark measures admissions")
			}
		}
	})
}
