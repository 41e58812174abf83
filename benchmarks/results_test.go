package benchmarks

import (
	"context"
	"encoding/csv"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
)

var (
	resultsDir = flag.String("results", "", "write the tests' figures as TSV files into this folder, for ./report")
	ceiling    = flag.Bool("ceiling", false, "run TestCeiling: redis-benchmark's EVALSHA throughput (needs redis-benchmark)")
)

// writeTSV writes rows, under a header, to name in the results folder, if
// one was given.
func writeTSV(t *testing.T, name string, header []string, rows [][]string) {
	t.Helper()
	if *resultsDir == "" {
		return
	}
	var b strings.Builder
	for _, row := range append([][]string{header}, rows...) {
		b.WriteString(strings.Join(row, "\t"))
		b.WriteByte('\n')
	}
	if err := os.MkdirAll(*resultsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(*resultsDir, name), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// testBreaker configures the production chains' breakers in the tests.
// The default per-call deadline, 8 ms, can pass on a loaded machine, and
// the default mode then allows the call (fail-open): an admission no
// store made, which TestOverGrant would count as over-grant and
// TestCommandsPerDecision as a decision without a command. A minute's
// deadline keeps the store deciding every call, fail-closed makes any
// answer the breaker still gives a denial, which cannot over-grant, and
// the tests fail if the breaker answered any decision at all.
var testBreaker = []policy.BreakerOption{policy.WithTimeout(time.Minute), policy.WithMode(policy.FailClosed)}

// modeAnswers returns how many decisions c's breaker has answered by its
// mode, 0 for a contender without one.
func modeAnswers(c Contender) int64 {
	if c.ModeAnswers == nil {
		return 0
	}
	return c.ModeAnswers()
}

func isChain(name string) bool {
	for _, p := range Chains {
		if p.Chain == name {
			return true
		}
	}
	return false
}

// TestOverGrant runs the over-grant test on every Redis contender in turn:
// 64 goroutines take from one key, limited to 10 a second with a burst of
// 10, as fast as they can for 3 s (1 s with -short). A limiter may admit at
// most burst + rate × elapsed: 40 in 3 s. Admissions beyond that are the
// over-grant. sluice's stores and chains (whose breakers use
// testBreaker) must show none, and must admit at least three quarters of
// the bound (a limiter that denies everything is not exact either); other
// libraries' figures are reported.
func TestOverGrant(t *testing.T) {
	span := 3 * time.Second
	if testing.Short() {
		span = time.Second
	}
	lim := Limit{Rate: 10, Burst: 10}
	contenders, err := redisContenders(redistest.Shared(t).Addr(), lim, testBreaker...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range contenders {
			c.Close()
		}
	}()
	var rows [][]string
	for _, c := range contenders {
		start := time.Now()
		r := drive(context.Background(), c, 64, func(int) string { return "overgrant" }, until(start.Add(span)))
		elapsed := time.Since(start) // from the first request sent to the last answer
		bound := int64(lim.Burst) + int64(math.Floor(float64(lim.Rate)*elapsed.Seconds()))
		over := max(r.admitted-bound, 0)
		pct := 100 * float64(over) / float64(bound)
		t.Logf("%-28s admitted %3d of %6d decisions in %v (bound %d): over-grant %.2f%%, %d errors",
			c.Name, r.admitted, r.decisions, elapsed.Round(time.Millisecond), bound, pct, r.failed)
		if c.Sluice {
			if r.failed > 0 {
				t.Errorf("%s: %d decisions failed: %v", c.Name, r.failed, r.err)
			}
			if n := modeAnswers(c); n > 0 {
				t.Errorf("%s: the breaker answered %d decisions, want the store to decide them all", c.Name, n)
			}
			if over > 0 || r.admitted < bound*3/4 {
				t.Errorf("%s admitted %d, want %d to %d", c.Name, r.admitted, bound*3/4, bound)
			}
		}
		rows = append(rows, []string{c.Name, strconv.FormatInt(r.admitted, 10), strconv.FormatInt(bound, 10),
			strconv.FormatInt(r.decisions, 10), strconv.FormatInt(r.failed, 10), fmt.Sprintf("%.3f", elapsed.Seconds())})
	}
	writeTSV(t, "overgrant.tsv", []string{"contender", "admitted", "bound", "decisions", "errors", "seconds"}, rows)
}

// TestCommandsPerDecision counts, through a proxy, the commands each Redis
// contender sends per decision, on a hot key and on per-user keys, after a
// warm-up that opens the clients' connections and loads their scripts.
// Each of sluice's stores must send one (a client that opens another
// connection during the count sends a few commands more to set it up).
// So must each production chain (its breaker configured by testBreaker),
// except that on the hot key its cache answers some denials with none:
// there it must send at most one.
func TestCommandsPerDecision(t *testing.T) {
	proxy := startCountingProxy(t, redistest.Shared(t).Addr())
	contenders, err := redisContenders(proxy.Addr(), redisLimit, testBreaker...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range contenders {
			c.Close()
		}
	}()
	const decisions = 3000
	var rows [][]string
	for _, w := range []string{"hot", "users"} {
		keys := workloads()[w]
		for _, c := range contenders {
			drive(context.Background(), c, 16, keys.key, upTo(500))
			before := proxy.settled()
			r := drive(context.Background(), c, 16, keys.key, upTo(decisions))
			per := float64(proxy.settled()-before) / decisions
			t.Logf("%-6s %-28s %.3f commands per decision", w, c.Name, per)
			least := 1.0
			if isChain(c.Name) && w == "hot" {
				least = 0 // a cached denial sends nothing
			}
			if c.Sluice && (per < least || per > 1.01 || r.failed > 0) {
				t.Errorf("%s on %s: %.3f commands per decision and %d failures (%v), want 1 and 0", c.Name, w, per, r.failed, r.err)
			}
			if n := modeAnswers(c); n > 0 {
				t.Errorf("%s on %s: the breaker answered %d decisions, want the store to decide them all", c.Name, w, n)
			}
			rows = append(rows, []string{w, c.Name, fmt.Sprintf("%.3f", per)})
		}
	}
	writeTSV(t, "commands.tsv", []string{"workload", "contender", "commands"}, rows)
}

// TestCeiling measures what the server itself can do: redis-benchmark, a
// C client with its own event loop, running the reference token bucket
// (refBucket) with EVALSHA from 64 connections, one command at a time and
// 16 to a pipeline, on a hot key and on 10,000 random keys. It runs only
// with -ceiling.
func TestCeiling(t *testing.T) {
	if !*ceiling {
		t.Skip("run with -ceiling")
	}
	bin, err := exec.LookPath("redis-benchmark")
	if err != nil {
		t.Fatal("redis-benchmark is not on the PATH (Debian: apt-get install redis-tools)")
	}
	srv := redistest.Start(t)
	r, err := srv.Do("SCRIPT", "LOAD", refBucket)
	if err != nil {
		t.Fatal(err)
	}
	sha, err := r.String()
	if err != nil {
		t.Fatal(err)
	}
	rate, burst := strconv.Itoa(redisLimit.Rate), strconv.Itoa(redisLimit.Burst)
	var rows [][]string
	for _, w := range []struct{ name, key string }{{"hot", "ceiling:hot"}, {"users", "ceiling:user:__rand_int__"}} {
		for _, pipeline := range []int{1, 16} {
			n := 100_000 // about 1 s one at a time
			if pipeline > 1 {
				n = 400_000
			}
			args := []string{"-h", "127.0.0.1", "-p", strconv.Itoa(srv.Port()), "-c", "64", "-n", strconv.Itoa(n),
				"-P", strconv.Itoa(pipeline), "-r", strconv.Itoa(users), "--csv",
				"EVALSHA", sha, "1", w.key, rate, burst}
			out, err := exec.Command(bin, args...).Output()
			if err != nil {
				t.Fatalf("redis-benchmark %s: %v", strings.Join(args, " "), err)
			}
			rps, err := csvRPS(out)
			if err != nil {
				t.Fatalf("redis-benchmark's output %q: %v", out, err)
			}
			t.Logf("%-5s pipeline %2d: %.0f EVALSHA/s", w.name, pipeline, rps)
			rows = append(rows, []string{w.name, strconv.Itoa(pipeline), fmt.Sprintf("%.0f", rps)})
		}
	}
	writeTSV(t, "ceiling.tsv", []string{"workload", "pipeline", "rps"}, rows)
}

// csvRPS reads the requests per second from redis-benchmark's --csv
// output: a header row, then one row per test whose second field it is.
func csvRPS(out []byte) (float64, error) {
	records, err := csv.NewReader(strings.NewReader(string(out))).ReadAll()
	if err != nil {
		return 0, err
	}
	if len(records) < 2 || len(records[1]) < 2 || records[0][1] != "rps" {
		return 0, fmt.Errorf("want a header naming rps and one row, got %d rows", len(records))
	}
	return strconv.ParseFloat(records[1][1], 64)
}
