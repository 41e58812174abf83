package benchmarks

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/cputime"
	"github.com/sluicehq/sluice/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// The limits of the speed benchmarks. On Redis a hot key's demand is a few
// times the rate, so every contender both admits and denies. In memory a
// hot key is far over its limit, so it measures denials, while per-user
// and random keys stay under it and measure admissions. (The in-memory
// rate stays below 31,622 a second: sethvargo/go-limiter refills
// Interval/Tokens tokens a tick, which is less than Tokens above
// √(Interval in ns); see docs/benchmarks.md.)
var (
	redisLimit  = Limit{Rate: 20_000, Burst: 100}
	memoryLimit = Limit{Rate: 10_000, Burst: 10_000}
)

// The workloads' keys.
const (
	users      = 10_000    // "users": each decision picks one of 10,000 users
	randomKeys = 100_000   // "random100k": one of 100,000 keys, uniformly
	distinct   = 1_000_000 // "distinct1M": every decision a key never seen
)

var goroutineCounts = []int{1, 16, 64, 256}

// keyset is a workload's keys and the random order decisions draw them in,
// built before any timer starts so that no contender pays for it.
type keyset struct {
	keys  []string
	order []uint32 // indexes into keys; decision i uses keys[order[i%len(order)]]
}

func (k *keyset) key(i int) string { return k.keys[k.order[i%len(k.order)]] }

func newKeyset(prefix string, n int) *keyset {
	k := &keyset{keys: make([]string, n), order: make([]uint32, 1<<20)}
	for i := range k.keys {
		k.keys[i] = prefix + strconv.Itoa(i)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range k.order {
		k.order[i] = uint32(r.IntN(n))
	}
	return k
}

var workloads = sync.OnceValue(func() map[string]*keyset {
	return map[string]*keyset{
		"hot":        newKeyset("hot", 1),
		"users":      newKeyset("user:", users),
		"random100k": newKeyset("key:", randomKeys),
	}
})

// tally is what a run of decisions made, admitted and failed.
type tally struct {
	decisions, admitted, failed int64
	err                         error // the first failure
}

// drive has goroutines make decisions with c, decision i on key(i), until
// done(i) says to stop. Goroutines take decisions in chunks, so that the
// shared counter is not what a benchmark measures.
func drive(ctx context.Context, c Contender, goroutines int, key func(int) string, done func(i int) bool) tally {
	const chunk = 16
	var (
		next                        atomic.Int64
		decisions, admitted, failed atomic.Int64
		firstErr                    sync.Once
		wg                          sync.WaitGroup
		out                         tally
	)
	for range goroutines {
		wg.Go(func() {
			var made, ok, bad int64
			defer func() { decisions.Add(made); admitted.Add(ok); failed.Add(bad) }()
			for {
				start := int(next.Add(chunk)) - chunk
				for i := start; i < start+chunk; i++ {
					if done(i) {
						return
					}
					allowed, err := c.Allow(ctx, key(i))
					made++
					switch {
					case err != nil:
						bad++
						firstErr.Do(func() { out.err = err })
					case allowed:
						ok++
					}
				}
			}
		})
	}
	wg.Wait()
	out.decisions, out.admitted, out.failed = decisions.Load(), admitted.Load(), failed.Load()
	return out
}

// upTo stops drive after decisions 0 to n-1.
func upTo(n int) func(int) bool { return func(i int) bool { return i >= n } }

// until stops drive at deadline.
func until(deadline time.Time) func(int) bool {
	return func(int) bool { return !time.Now().Before(deadline) }
}

// check fails the benchmark if a sluice contender failed a decision, or
// if another failed every one of its n. Another library's failures
// (throttled gives up after 10 lost compare-and-swaps, the WATCH/MULTI
// version after 100 aborted transactions) are counted, not fatal.
func check(b *testing.B, c Contender, t tally, n int) {
	b.Helper()
	if c.Sluice && t.failed > 0 {
		b.Fatalf("%s: %d of %d decisions failed: %v", c.Name, t.failed, n, t.err)
	}
	if t.failed == int64(n) {
		b.Fatalf("%s: every decision failed: %v", c.Name, t.err)
	}
	if t.failed > 0 {
		b.Logf("%s: %d of %d decisions failed, the first: %v", c.Name, t.failed, n, t.err)
	}
}

// report checks a run of b.N decisions and adds the figures every
// comparison shows beside ns/op and allocs/op.
func report(b *testing.B, c Contender, t tally, elapsed time.Duration) {
	b.Helper()
	check(b, c, t, b.N)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(float64(t.admitted)/float64(b.N), "admitted/op")
	b.ReportMetric(float64(t.failed)/float64(b.N), "errors/op")
}

// BenchmarkRedis compares every Redis contender on one real redis-server:
// a hot key and per-user keys, at 1, 16, 64 and 256 goroutines; at 64,
// the server's pipelined ceiling for sluice's own command too (see
// CeilingCell). Beside
// ns/op and allocs/op it reports the server's CPU time per decision
// (server-µs/op), the benchmark process's (client-µs/op: the contender
// and its client, and the few instructions of the loop that drives it),
// and for the production chains the share of decisions their breaker
// answered by its mode (mode-answers/op).
// TestCommandsPerDecision counts the commands.
func BenchmarkRedis(b *testing.B) {
	srv := redistest.Shared(b)
	contenders, err := RedisContenders(srv.Addr(), redisLimit)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		for _, c := range contenders {
			c.Close()
		}
	})
	// sluice's own command, by workload, for the ceiling cells.
	own := make(map[string]ceilingCommand)
	for _, c := range sluiceCommands(b, srv) {
		if c.script == NameRueidisStore {
			own[c.workload] = c
		}
	}
	for _, w := range []string{"hot", "users"} {
		keys := workloads()[w]
		for _, g := range goroutineCounts {
			if g == ceilingGoroutines {
				// The server's ceiling for sluice's command, measured
				// beside the contenders, so that a share of it compares
				// figures of the same minutes of a machine whose speed
				// drifts (TestCeiling's figures are measured once).
				b.Run(fmt.Sprintf("%s/g=%d/%s", w, g, CeilingCell), func(b *testing.B) {
					rps, err := rawRESP(srv.Addr(), own[w], g, ceilingPipeline, b.N)
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(rps, "EVALSHA/s")
				})
			}
			for _, c := range contenders {
				b.Run(fmt.Sprintf("%s/g=%d/%s", w, g, c.Name), func(b *testing.B) {
					runRedis(b, srv, c, g, keys.key)
				})
			}
		}
	}
}

// runRedis runs b.N decisions of c from g goroutines, decision i on
// key(i), and reports, beside what report does, the CPU time the server
// and this process took per decision (server-µs/op, client-µs/op), the
// script calls the server ran per decision (calls/op: below 1 where
// decisions were merged) and, where the system counts them, the write
// system calls this process made per decision (writes/op: below 1 where
// several decisions went out in one write), and for a chain the share of
// decisions its breaker answered by its mode (mode-answers/op).
func runRedis(b *testing.B, srv *redistest.Server, c Contender, g int, key func(int) string) {
	closeCircuit(b, c)
	before, clientBefore := readServer(b, srv), processCPU(b)
	writesBefore, countsWrites := writeCalls()
	var modeBefore int64
	if c.ModeAnswers != nil {
		modeBefore = c.ModeAnswers()
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	t := drive(b.Context(), c, g, key, upTo(b.N))
	elapsed := time.Since(start)
	b.StopTimer()
	after, clientAfter := readServer(b, srv), processCPU(b)
	writesAfter, _ := writeCalls()
	n := float64(b.N)
	report(b, c, t, elapsed)
	b.ReportMetric((after.cpu-before.cpu)/n, "server-µs/op")
	b.ReportMetric((clientAfter-clientBefore)/n, "client-µs/op")
	b.ReportMetric((after.scripts-before.scripts)/n, "calls/op")
	if countsWrites {
		b.ReportMetric(float64(writesAfter-writesBefore)/n, "writes/op")
	}
	if c.ModeAnswers != nil {
		// A chain's breaker answers by its mode (fail-open) a call that
		// misses its deadline: fast, and not a decision of the store.
		// Counted, so that a table can say how many of a chain's
		// decisions were.
		b.ReportMetric(float64(c.ModeAnswers()-modeBefore)/n, "mode-answers/op")
	}
}

// closeCircuit waits, for a chain contender, until its breaker's circuit
// is closed, so that a benchmark does not inherit a circuit that the
// previous one opened: an open circuit lets a call through to the store
// only after its open timeout (1 s), and closes after a few calls in a
// row succeed. It makes one decision every 10 ms, on a key of its own,
// for at most 10 s.
func closeCircuit(b *testing.B, c Contender) {
	b.Helper()
	if c.CircuitClosed == nil {
		return
	}
	for deadline := time.Now().Add(10 * time.Second); !c.CircuitClosed(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("%s: the breaker's circuit did not close within 10 s", c.Name)
		}
		if _, err := c.Allow(b.Context(), "settle"); err != nil {
			b.Fatalf("%s: %v", c.Name, err)
		}
	}
}

// BenchmarkMemory compares the in-process contenders: a hot key, per-user
// keys and 100,000 random keys, at 1, 16, 64 and 256 goroutines. Beside
// ns/op it reports the process's CPU time per decision (cpu-ns/op), which
// other processes on a shared machine move far less than the decisions a
// second.
func BenchmarkMemory(b *testing.B) {
	contenders, err := MemoryContenders(memoryLimit)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		for _, c := range contenders {
			c.Close()
		}
	})
	for _, w := range []string{"hot", "users", "random100k"} {
		keys := workloads()[w]
		for _, g := range goroutineCounts {
			for _, c := range contenders {
				b.Run(fmt.Sprintf("%s/g=%d/%s", w, g, c.Name), func(b *testing.B) {
					b.ReportAllocs()
					b.ResetTimer()
					start, cpu := time.Now(), processCPU(b)
					t := drive(b.Context(), c, g, keys.key, upTo(b.N))
					elapsed, cpu := time.Since(start), processCPU(b)-cpu
					b.StopTimer()
					report(b, c, t, elapsed)
					b.ReportMetric(1e3*cpu/float64(b.N), "cpu-ns/op")
				})
			}
		}
	}
}

// BenchmarkDistinct1M gives each in-process contender, new, a million keys
// it has never seen, one decision each: the cost of a first decision, and
// the memory each key keeps (B/key, after a collection). One op is the
// whole million; ns/decision and allocs/decision divide by it.
func BenchmarkDistinct1M(b *testing.B) {
	keys := newKeyset("new:", distinct)
	for _, g := range []int{1, 64} {
		for _, start := range memoryStarts {
			probe, err := start(memoryLimit) // for its name
			if err != nil {
				b.Fatal(err)
			}
			probe.Close()
			b.Run(fmt.Sprintf("g=%d/%s", g, probe.Name), func(b *testing.B) {
				var elapsed time.Duration
				var retained, mallocs uint64
				var t tally
				for range b.N {
					b.StopTimer()
					runtime.GC()
					var m0, m1 runtime.MemStats
					runtime.ReadMemStats(&m0)
					c, err := start(memoryLimit)
					if err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					began := time.Now()
					t = drive(b.Context(), c, g, func(j int) string { return keys.keys[j] }, upTo(distinct))
					elapsed += time.Since(began)
					b.StopTimer()
					runtime.ReadMemStats(&m1)
					mallocs += m1.Mallocs - m0.Mallocs
					runtime.GC()
					runtime.ReadMemStats(&m1)
					retained += m1.HeapAlloc - min(m0.HeapAlloc, m1.HeapAlloc)
					c.Close()
					check(b, c, t, distinct)
				}
				per := float64(b.N) * distinct
				b.ReportMetric(per/elapsed.Seconds(), "decisions/s")
				b.ReportMetric(float64(elapsed.Nanoseconds())/per, "ns/decision")
				b.ReportMetric(float64(mallocs)/per, "allocs/decision")
				b.ReportMetric(float64(retained)/per, "B/key")
				b.ReportMetric(float64(t.admitted)/distinct, "admitted/op")
			})
		}
	}
}

// processCPU returns the CPU time, in µs, this process has used: the
// contenders' clients, their goroutines and the runtime's.
func processCPU(tb testing.TB) float64 {
	tb.Helper()
	d, err := cputime.Process()
	if err != nil {
		tb.Fatal(err)
	}
	return float64(d.Nanoseconds()) / 1e3
}

// serverStats are the Redis server's counters a benchmark reads before
// and after its decisions.
type serverStats struct {
	cpu     float64 // µs of CPU time: running commands and scripts, and reading and writing its clients' sockets
	scripts float64 // script calls: EVALSHA and EVAL
}

// readServer reads the Redis server's CPU time and script calls so far.
func readServer(tb testing.TB, srv *redistest.Server) serverStats {
	tb.Helper()
	r, err := srv.Do("INFO", "cpu", "commandstats")
	if err != nil {
		tb.Fatal(err)
	}
	info, err := r.String()
	if err != nil {
		tb.Fatal(err)
	}
	var s serverStats
	for line := range strings.SplitSeq(info, "\r\n") {
		name, value, _ := strings.Cut(line, ":")
		switch name {
		case "used_cpu_sys", "used_cpu_user":
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				tb.Fatalf("INFO cpu: %q: %v", line, err)
			}
			s.cpu += v * 1e6
		case "cmdstat_evalsha", "cmdstat_eval":
			// calls=N,usec=...
			calls, _, _ := strings.Cut(strings.TrimPrefix(value, "calls="), ",")
			v, err := strconv.ParseFloat(calls, 64)
			if err != nil {
				tb.Fatalf("INFO commandstats: %q: %v", line, err)
			}
			s.scripts += v
		}
	}
	return s
}

// writeCalls returns the write system calls this process has made
// (/proc/self/io's syscw), and false where the system does not count
// them.
func writeCalls() (int64, bool) {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, false
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "syscw: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
