package benchmarks

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores"
)

// redisStores are the Redis stores that the layer benchmarks build the
// chain on, by name.
var redisStores = []struct {
	name string
	open func(addr, prefix string) (core.Store, func(), error)
}{
	{"redisstore", redisStore},
	{"rueidisstore", rueidisStore},
}

// BenchmarkLayers takes the production chain apart, layer by layer, over
// each Redis store: the bare store, then layered over it, then the
// breaker over that, then policy, then telemetry (the whole chain, as
// [RedisContenders] builds it), each deciding one hot key from 64
// goroutines, as BenchmarkRedis's hot-key cell does. A layer's cost is
// its row's client-µs/op less the row below it; compare the rows with
// benchstat -col /layers.
//
// On a machine whose two cores the benchmark shares with Redis, with
// other work besides, these figures move by half from run to run;
// BenchmarkLayerCost measures the layers' own CPU alone, and
// BenchmarkLayerRounds what they cost a caller that waits for its round
// trip, without Redis.
func BenchmarkLayers(b *testing.B) {
	srv := redistest.Shared(b)
	keys := workloads()["hot"]
	for _, s := range redisStores {
		for n := range len(ChainLayers) + 1 {
			top := "store"
			if n > 0 {
				top = ChainLayers[n-1]
			}
			name := fmt.Sprintf("layers-%d-%s", n, top)
			c, err := newStore(s.name+"-"+name, s.open, n, nil)(srv.Addr(), redisLimit)
			if err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("store=%s/layers=%d-%s", s.name, n, top), func(b *testing.B) {
				runRedis(b, srv, c, 64, keys.key)
			})
			c.Close()
		}
	}
}

// BenchmarkChainFloor measures, over Redis, the least that any chain
// with the production chain's features could add to a decision, beside
// the bare store and the chain itself in the same run: floor is a
// decorator that does in one frame only what those features cannot
// decide without, and none of what else they do (no circuit, deadline,
// stall meter, policy or span): it reads the monotonic clock before the
// store's call and after it (the breaker's deadline and the latency it
// adapts to), looks the key up among the denials it keeps, under a
// shard's lock, and keeps each denial (layered), and adds to two
// counters (the breaker's tallies). Each cell decides as BenchmarkRedis's
// cell of the same workload does, at 64 goroutines. The chain's goal is
// read as chain's client-µs/op over store's within a run, and floor's
// over store's is where every design of the chain starts:
//
//	go test -c -o /tmp/bench.test ./benchmarks
//	/tmp/bench.test -test.run='^$' -test.bench=BenchmarkChainFloor -test.benchtime=2s   # several times
func BenchmarkChainFloor(b *testing.B) {
	srv := redistest.Shared(b)
	for _, s := range redisStores {
		floor := func(addr, prefix string) (core.Store, func(), error) {
			store, closeClient, err := s.open(addr, prefix)
			if err != nil {
				return nil, nil, err
			}
			return &floorLayer{Store: store}, closeClient, nil
		}
		for _, w := range []string{"hot", "users"} {
			keys := workloads()[w]
			for _, top := range []string{"store", "floor", "chain"} {
				start := newStore(s.name+"-"+top, s.open, 0, nil)
				switch top {
				case "floor":
					start = newStore(s.name+"-"+top, floor, 0, nil)
				case "chain":
					start = newStore(s.name+"-"+top, s.open, len(ChainLayers), nil)
				}
				c, err := start(srv.Addr(), redisLimit)
				if err != nil {
					b.Fatal(err)
				}
				b.Run(fmt.Sprintf("store=%s/%s/%s", s.name, w, top), func(b *testing.B) {
					runRedis(b, srv, c, 64, keys.key)
				})
				c.Close()
			}
		}
	}
}

// floorLayer is BenchmarkChainFloor's floor: the per-decision work of the
// chain's features in one frame. It keeps each key's last denial and
// looks it up as layered does, but answers from it only if it lies an
// hour ahead of the call (a denial's own instant never does), so that
// every decision asks the store, as the chain's do on these workloads. It
// keeps at most a workload's keys: 10,000 users.
type floorLayer struct {
	core.Store
	shards [16]struct {
		mu     sync.Mutex
		denied map[string]time.Time
		_      [40]byte // a shard a cache line
	}
	calls   atomic.Int64
	latency [8]atomic.Int64 // by the latency's power of two in ms
}

// floorSeed hashes floorLayer's keys to their shards.
var floorSeed = maphash.MakeSeed()

// Apply decides req as its store does, doing what the chain must besides.
func (f *floorLayer) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	start := time.Now()
	shard := &f.shards[maphash.String(floorSeed, req.Key)%uint64(len(f.shards))]
	shard.mu.Lock()
	until, ok := shard.denied[req.Key]
	shard.mu.Unlock()
	if ok && until.Sub(start) > time.Hour {
		return core.Decision{}, nil
	}
	d, err := f.Store.Apply(ctx, req)
	took := time.Since(start)
	f.calls.Add(1)
	f.latency[min(bits.Len64(uint64(took.Milliseconds())), len(f.latency)-1)].Add(1)
	if err == nil && !d.Allowed {
		shard.mu.Lock()
		if shard.denied == nil {
			shard.denied = make(map[string]time.Time)
		}
		shard.denied[req.Key] = start
		shard.mu.Unlock()
	}
	return d, err
}

// BenchmarkLayerCost measures the CPU each layer of the production chain
// adds to a decision, alone: the layers of BenchmarkLayers, built the
// same way, over a store that answers every request at once with an
// admission, so that nothing but the layers runs. Decisions come from
// GOMAXPROCS goroutines at once (b.RunParallel), on one key; cpu-ns/op
// is the process's CPU time per decision (getrusage), which is what a
// layer costs a machine however many cores share the work.
func BenchmarkLayerCost(b *testing.B) {
	open := func(string, string) (core.Store, func(), error) {
		return stores.Func(func(context.Context, core.Request) (core.Decision, error) {
			return core.Decision{Allowed: true, Limit: 100, Remaining: 99}, nil
		}), func() {}, nil
	}
	for n := range len(ChainLayers) + 1 {
		top := "store"
		if n > 0 {
			top = ChainLayers[n-1]
		}
		c, err := newStore("fixed", open, n, nil)("", redisLimit)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("layers=%d-%s", n, top), func(b *testing.B) {
			ctx := b.Context()
			before := processCPU(b)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.Allow(ctx, "hot"); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(1e3*(processCPU(b)-before)/float64(b.N), "cpu-ns/op")
		})
		c.Close()
	}
}

// BenchmarkLayerRounds measures what the layers of BenchmarkLayerCost add
// to a decision whose caller waits for its round trip, as over Redis,
// without Redis or a network: 64 goroutines decide one key through the
// layers over a store whose callers queue their calls and wait for a
// goroutine of its own to answer them, a round at a time, as a Redis
// store's sender does. A caller that waited finds its stack gone cold (63
// others decided meanwhile), so a layer costs more here than alone: every
// cache line of the stack it writes on its way to the store and back.
// cpu-ns/op is the process's CPU time per decision; -test.cpu=1 steadies
// it (one processor: no thread spins waiting for work).
func BenchmarkLayerRounds(b *testing.B) {
	for n := range len(ChainLayers) + 1 {
		top := "store"
		if n > 0 {
			top = ChainLayers[n-1]
		}
		open := func(string, string) (core.Store, func(), error) {
			r := new(rounds)
			return stores.Func(func(ctx context.Context, _ core.Request) (core.Decision, error) {
				if err := r.wait(ctx); err != nil {
					return core.Decision{}, err
				}
				return core.Decision{Allowed: true, Limit: 100, Remaining: 99}, nil
			}), func() {}, nil
		}
		c, err := newStore("rounds", open, n, nil)("", redisLimit)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("layers=%d-%s", n, top), func(b *testing.B) {
			before := processCPU(b)
			b.ReportAllocs()
			b.ResetTimer()
			t := drive(b.Context(), c, 64, func(int) string { return "hot" }, upTo(b.N))
			b.StopTimer()
			if t.err != nil {
				b.Fatal(t.err)
			}
			b.ReportMetric(1e3*(processCPU(b)-before)/float64(b.N), "cpu-ns/op")
		})
		c.Close()
	}
}

// rounds answers its callers a round at a time, as a Redis store's queue
// does (stores/internal/redisengine): a caller queues its call and waits
// until a sender, a goroutine that runs while calls are queued, has
// answered its round, or until its context ends.
type rounds struct {
	mu      sync.Mutex
	queue   []chan struct{}
	sending bool
}

// waiting holds the callers' channels, each used again by a next call.
var waiting = sync.Pool{New: func() any { return make(chan struct{}, 1) }}

// wait queues a call and waits for its round.
func (r *rounds) wait(ctx context.Context) error {
	ch := waiting.Get().(chan struct{})
	r.mu.Lock()
	r.queue = append(r.queue, ch)
	if !r.sending {
		r.sending = true
		go r.send()
	}
	r.mu.Unlock()
	select {
	case <-ch:
		waiting.Put(ch)
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// send answers the queued calls, round after round, until none is left;
// it yields after each round, so that the callers it answered join the
// next, as the engine's sender does.
func (r *rounds) send() {
	var round []chan struct{}
	for {
		r.mu.Lock()
		round, r.queue = r.queue, round[:0]
		if len(round) == 0 {
			r.sending = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		for i, ch := range round {
			ch <- struct{}{}
			round[i] = nil
		}
		runtime.Gosched()
	}
}
