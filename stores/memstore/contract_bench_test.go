package memstore

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/cputime"
)

// BenchmarkContract takes a decision on one hot key apart, serially, under
// the in-memory limit of make bench-compare (10,000 a second, a burst of
// 10,000, so that the key is denied):
//
//   - limiter: sluice.Limiter.Allow, what users call;
//   - apply: Store.Apply, called on the *Store itself with a request
//     built for the call, as every caller builds one;
//   - apply-reused: the same, given one request built before the loop;
//   - decide: the store's locked decision alone, given a request already
//     checked and the clock read;
//   - clock: the clock read alone.
//
// limiter less apply is the Limiter; apply less decide and clock is what
// the core.Store contract costs a call (the request checked, the Request
// and the Decision passed by value); decide is finding the key and
// running the algorithm. apply less apply-reused is what building the
// request costs the caller: it was a wait of about 11 ns while a request
// passed in memory (its fresh fields stored a word at a time, then
// copied 16 bytes at a time), and is nothing now that it passes in
// registers. Beside ns/op each reports cpu-ns/op, the process's CPU time
// per decision, which other processes on a shared machine move far less
// than the wall clock. docs/benchmarks.md explains how to read them.
//
//	go test -run '^$' -bench BenchmarkContract -count 6 ./stores/memstore
func BenchmarkContract(b *testing.B) {
	s, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	limit := core.PerSecond(10_000).WithBurst(10_000)
	lim, err := sluice.NewLimiter(s, algorithms.TokenBucket, limit)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for range 20_000 { // drain the burst: every measured decision is a denial
		lim.Allow(ctx, "hot")
	}
	req := core.Request{Key: "hot", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: limit}}
	b.Run("limiter", func(b *testing.B) {
		defer reportCPU(b)()
		for b.Loop() {
			lim.Allow(ctx, "hot")
		}
	})
	b.Run("apply", func(b *testing.B) {
		defer reportCPU(b)()
		for b.Loop() {
			s.Apply(ctx, core.Request{Key: "hot", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: limit}})
		}
	})
	b.Run("apply-reused", func(b *testing.B) {
		defer reportCPU(b)()
		for b.Loop() {
			s.Apply(ctx, req)
		}
	})
	b.Run("decide", func(b *testing.B) {
		defer reportCPU(b)()
		var d core.Decision
		clock := s.now()
		for b.Loop() {
			if err := s.decide(&req, clock/1e3, clock, &d); err != nil {
				b.Fatal(err)
			}
		}
		if d.Allowed {
			b.Fatal("admitted: the benchmark measures denials")
		}
	})
	b.Run("clock", func(b *testing.B) {
		defer reportCPU(b)()
		var sum int64
		for b.Loop() {
			sum += s.now()
		}
		if sum == 0 {
			b.Fatal("the clock read zero")
		}
	})
}

// reportCPU reads the process's CPU time and returns a function that
// reports the CPU time since, per iteration of b, as cpu-ns/op.
func reportCPU(b *testing.B) func() {
	before, err := cputime.Process()
	if err != nil {
		b.Fatal(err)
	}
	return func() {
		after, err := cputime.Process()
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(after-before)/float64(b.N), "cpu-ns/op")
	}
}
