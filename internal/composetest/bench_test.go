package composetest_test

import (
	"context"
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/internal/cputime"
	"github.com/sluicehq/sluice/redistest"
)

// BenchmarkChain compares a single rule's decision with a 3-rule stack's
// (per-user, per-tenant, global), each through the production chain over
// a Redis store, from 64 goroutines on per-user keys. Limits are high
// enough that every decision is admitted and reaches Redis: what is
// measured is the cost of a stack over a single decision, not the cache.
// Beside decisions/s it reports the process's CPU time per decision
// (client-µs/op): the store's client and every layer above it.
//
//	go test -run '^$' -bench BenchmarkChain -count 6 ./internal/composetest
func BenchmarkChain(b *testing.B) {
	srv := redistest.Start(b)
	backends := []struct {
		name string
		new  func(testing.TB) sluice.Store
	}{
		{"rueidisstore", onRueidis(newRueidis(b, srv.Addr()))},
		{"redisstore", onGoRedis(newGoRedis(b, srv.Addr()))},
	}
	high := sluice.PerSecond(1 << 30)
	for _, be := range backends {
		b.Run(be.name+"/bare/1-rule", func(b *testing.B) {
			store := be.new(b)
			defer store.Close()
			oneRule(b, store, high)
		})
		b.Run(be.name+"/chain/1-rule", func(b *testing.B) {
			store, _ := chain(b, be.new(b))
			defer store.Close()
			oneRule(b, store, high)
		})
		b.Run(be.name+"/chain/3-rules", func(b *testing.B) {
			store, _ := chain(b, be.new(b))
			defer store.Close()
			stack, err := sluice.NewStack(store,
				sluice.Rule{Name: "user", Algorithm: algorithms.TokenBucket, Limit: high},
				sluice.Rule{Name: "tenant", Algorithm: algorithms.GCRA, Limit: high},
				sluice.Rule{Name: "global", Algorithm: algorithms.TokenBucket, Limit: high},
			)
			if err != nil {
				b.Fatal(err)
			}
			run(b, func(ctx context.Context, user, tenant string) (bool, error) {
				v, err := stack.Allow(ctx, user, tenant, "global")
				return v.Allowed, err
			})
		})
	}
}

// oneRule runs a token bucket's decisions on store.
func oneRule(b *testing.B, store sluice.Store, limit sluice.Limit) {
	lim, err := sluice.NewLimiter(store, algorithms.TokenBucket, limit)
	if err != nil {
		b.Fatal(err)
	}
	run(b, func(ctx context.Context, user, tenant string) (bool, error) {
		d, err := lim.Allow(ctx, user)
		return d.Allowed, err
	})
}

// run calls decide from 64 goroutines on 2 CPUs (32 per GOMAXPROCS
// there), each on random keys of 10,000 users in 100 tenants, and fails b
// on an error or a denial.
func run(b *testing.B, decide func(ctx context.Context, user, tenant string) (bool, error)) {
	users := make([]string, 10000)
	for i := range users {
		users[i] = "user:" + strconv.Itoa(i)
	}
	tenants := make([]string, 100)
	for i := range tenants {
		tenants[i] = "tenant:" + strconv.Itoa(i)
	}
	b.SetParallelism(max(1, 64/runtimeProcs()))
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU(b)
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(rand.Uint64(), 0))
		for pb.Next() {
			u := rng.IntN(len(users))
			ok, err := decide(ctx, users[u], tenants[u%len(tenants)])
			if err != nil {
				b.Error(err)
				return
			}
			if !ok {
				b.Error("denied under a limit no benchmark reaches")
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	b.ReportMetric((processCPU(b)-cpu)/float64(b.N), "client-µs/op")
}

// processCPU returns the CPU time this process has used, in µs.
func processCPU(b *testing.B) float64 {
	d, err := cputime.Process()
	if err != nil {
		b.Fatal(err)
	}
	return float64(d.Nanoseconds()) / 1e3
}

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }
