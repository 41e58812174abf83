package benchmarks

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redisfaults"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/redistest"
)

var (
	resultsDir = flag.String("results", "", "write the tests' figures as TSV files into this folder, for ./report")
	ceiling    = flag.Bool("ceiling", false, "run TestCeiling: the server's EVALSHA throughput for sluice's script and the reference one (needs redis-benchmark)")
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
// The default per-call deadline, 16 ms, can pass on a loaded machine, and
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
// Each of sluice's stores must send at most one (a client that opens
// another connection during the count sends a few commands more to set it
// up): on one server a store merges concurrent decisions into one script
// call. So must each production chain (its breaker configured by
// testBreaker), whose cache also answers some denials on the hot key with
// none.
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
			if c.Sluice && (per <= 0 || per > 1.01 || r.failed > 0) {
				t.Errorf("%s on %s: %.3f commands per decision and %d failures (%v), want at most 1 and 0", c.Name, w, per, r.failed, r.err)
			}
			if n := modeAnswers(c); n > 0 {
				t.Errorf("%s on %s: the breaker answered %d decisions, want the store to decide them all", c.Name, w, n)
			}
			rows = append(rows, []string{w, c.Name, fmt.Sprintf("%.3f", per)})
		}
	}
	writeTSV(t, "commands.tsv", []string{"workload", "contender", "commands"}, rows)
}

// TestCeiling measures what the server itself can do: a client with
// nothing of its own to compute sends one command from 64 connections,
// one at a time and 16 to a pipeline, on a hot key and on 10,000 random
// keys, as fast as the server answers. The commands are two EVALSHA: the
// one by which sluice-rueidisstore decides a request with the Redis
// benchmarks' limit, captured as the store sends it, and the reference
// token bucket's (refBucket).
//
// redis-benchmark, a C client with its own event loop, cannot send
// sluice's command: sluice packs the request in binary, NUL bytes
// included, and redis-benchmark cuts every argument, even one read from
// its standard input (-x), at its first NUL. So every command is also
// sent by rawRESP, a load generator in this file that writes
// redis-benchmark's pipeline of pre-encoded commands with any
// __rand_int__ replaced, on one core as redis-benchmark's event loop
// runs; the reference script, sent by both, shows how the two compare.
// Every run must have had every command succeed, and on the random keys
// have replaced every key's __rand_int__. It runs only with -ceiling.
func TestCeiling(t *testing.T) {
	if !*ceiling {
		t.Skip("run with -ceiling")
	}
	bin, err := exec.LookPath("redis-benchmark")
	if err != nil {
		t.Fatal("redis-benchmark is not on the PATH (Debian: apt-get install redis-tools)")
	}
	srv := redistest.Start(t)
	commands := append(sluiceCommands(t, srv), refCommands(t, srv)...)
	var rows [][]string
	// Both scripts and both clients take turns in each workload and
	// pipeline, so that the machine's drift falls on all alike.
	for _, w := range []string{"hot", "users"} {
		for _, pipeline := range []int{1, ceilingPipeline} {
			n := 100_000 // about 1 s one at a time
			if pipeline > 1 {
				n = 400_000
			}
			for _, c := range commands {
				if c.workload != w {
					continue
				}
				clients := []string{clientRaw}
				if !c.hasNUL() {
					clients = []string{clientRedisBenchmark, clientRaw}
				}
				for _, client := range clients {
					if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
						t.Fatal(err)
					}
					var rps float64
					if client == clientRaw {
						rps, err = rawRESP(srv.Addr(), c, ceilingGoroutines, pipeline, n)
					} else {
						rps, err = redisBenchmark(bin, srv.Port(), c, ceilingGoroutines, pipeline, n)
					}
					if err != nil {
						t.Fatalf("%s %s %s pipeline %d: %v", client, c.script, w, pipeline, err)
					}
					checkCeilingRun(t, srv, c, n)
					t.Logf("%-5s pipeline %2d: %-19s %-15s %.0f EVALSHA/s", w, pipeline, c.script, client, rps)
					rows = append(rows, []string{c.script, client, w, strconv.Itoa(pipeline), fmt.Sprintf("%.0f", rps)})
				}
			}
		}
	}
	writeTSV(t, "ceiling.tsv", []string{"script", "client", "workload", "pipeline", "rps"}, rows)
}

// TestCeiling's connections, and its commands to a pipeline when it
// pipelines; BenchmarkRedis's ceiling cells send the same.
const (
	ceilingGoroutines = 64
	ceilingPipeline   = 16
)

// The clients of TestCeiling, as ceiling.tsv names them.
const (
	clientRedisBenchmark = "redis-benchmark"
	clientRaw            = "raw-resp"
)

// ceilingRunLimit bounds each run of TestCeiling's clients, which take a
// few seconds, so that a server that stops answering fails the test.
const ceilingRunLimit = time.Minute

// randInt is what redis-benchmark -r replaces, in every argument, with a
// 12-digit number below its -r; rawRESP does the same.
const randInt = "__rand_int__"

// A ceilingCommand is a command for TestCeiling's clients to send.
type ceilingCommand struct {
	script   string   // the contender that sends this command
	workload string   // "hot" or "users"
	args     [][]byte // the command and its arguments
	key      string   // the Redis key it writes, any __rand_int__ unreplaced
}

func (c ceilingCommand) hasNUL() bool {
	for _, a := range c.args {
		if bytes.IndexByte(a, 0) >= 0 {
			return true
		}
	}
	return false
}

// sluiceCommands returns the EVALSHA by which sluice-rueidisstore decides
// a request of the hot key and of a user, captured through a counting
// proxy as the contender (with the Redis benchmarks' limit) sends it, so
// that nothing of sluice's encoding is copied here. The user is
// "user:__rand_int__", as the users workload names them (user:0 to
// user:9999): the store puts a key in its hash tag, so the Redis key keeps
// one valid tag whatever number replaces the placeholder. It fails the
// test unless sluice's other Redis stores send the same command but for
// their keys' prefix, so that the ceiling is theirs too.
func sluiceCommands(t testing.TB, srv *redistest.Server) []ceilingCommand {
	t.Helper()
	proxy := startCountingProxy(t, srv.Addr())
	stores := []func(string, Limit) (Contender, error){newRueidisStore, newRedisStore}
	var out []ceilingCommand
	for i, start := range stores {
		c, err := start(proxy.Addr(), redisLimit)
		if err != nil {
			t.Fatal(err)
		}
		for j, w := range []struct{ name, key string }{{"hot", workloads()["hot"].key(0)}, {"users", "user:" + randInt}} {
			cmd := captureEVALSHA(t, proxy, c, w.key)
			key := string(cmd[3])
			if i == 0 {
				out = append(out, ceilingCommand{script: c.Name, workload: w.name, args: cmd, key: key})
				continue
			}
			first := out[j]
			if !bytes.Equal(cmd[1], first.args[1]) || !bytes.Equal(cmd[4], first.args[4]) ||
				strings.TrimPrefix(key, c.Name+":") != strings.TrimPrefix(first.key, first.script+":") {
				t.Errorf("%s decides %q with %q, want %s's command but for the prefix: %q", c.Name, w.key, cmd, first.script, first.args)
			}
		}
		c.Close()
	}
	return out
}

// captureEVALSHA returns the EVALSHA by which c decides a request of key,
// as the proxy c talks through saw it, after checking that it was the
// decision's one script call (EVAL or EVALSHA), of one key, c's key under
// its prefix with key as its hash tag, and one argument.
func captureEVALSHA(t testing.TB, proxy *countingProxy, c Contender, key string) [][]byte {
	t.Helper()
	ctx := context.Background()
	// The first decision loads the script (EVALSHA, NOSCRIPT, EVAL); the
	// second sends what every later one does.
	if _, err := c.Allow(ctx, key); err != nil {
		t.Fatal(err)
	}
	proxy.settled() // the first's commands are read
	var (
		mu   sync.Mutex
		seen [][][]byte
	)
	stop := proxy.watch(func(args [][]byte) {
		// A client may open a connection meanwhile: leave its setup out.
		if len(args) > 0 && bytes.HasPrefix(bytes.ToUpper(args[0]), []byte("EVAL")) {
			mu.Lock()
			seen = append(seen, args)
			mu.Unlock()
		}
	})
	_, err := c.Allow(ctx, key)
	proxy.settled()
	stop()
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || len(seen[0]) != 5 || !strings.EqualFold(string(seen[0][0]), "EVALSHA") || string(seen[0][2]) != "1" {
		t.Fatalf("%s decided %q with the scripts %q, want one EVALSHA of one key and one argument", c.Name, key, seen)
	}
	if k := string(seen[0][3]); !strings.HasPrefix(k, c.Name+":") || !strings.Contains(k, "{"+key+"}") {
		t.Fatalf("%s sent the key %q for %q, want it under its prefix with the key as its hash tag", c.Name, k, key)
	}
	return seen[0]
}

// refCommands returns refBucket's EVALSHA on the hot key and on a user,
// with the Redis benchmarks' limit, after loading the script.
func refCommands(t *testing.T, srv *redistest.Server) []ceilingCommand {
	t.Helper()
	r, err := srv.Do("SCRIPT", "LOAD", refBucket)
	if err != nil {
		t.Fatal(err)
	}
	sha, err := r.String()
	if err != nil {
		t.Fatal(err)
	}
	rate, burst := strconv.Itoa(redisLimit.Rate), strconv.Itoa(redisLimit.Burst)
	var out []ceilingCommand
	for _, w := range []struct{ name, key string }{{"hot", "ceiling:hot"}, {"users", "ceiling:user:" + randInt}} {
		var args [][]byte
		for _, a := range []string{"EVALSHA", sha, "1", w.key, rate, burst} {
			args = append(args, []byte(a))
		}
		out = append(out, ceilingCommand{script: NameRefScript, workload: w.name, args: args, key: w.key})
	}
	return out
}

// redisBenchmark runs redis-benchmark with c (which must hold no NUL byte)
// from conns connections, pipeline commands to a pipeline, n in all, and
// random numbers below users for __rand_int__, and returns its commands
// per second.
func redisBenchmark(bin string, port int, c ceilingCommand, conns, pipeline, n int) (float64, error) {
	args := []string{"-h", "127.0.0.1", "-p", strconv.Itoa(port), "-c", strconv.Itoa(conns), "-n", strconv.Itoa(n),
		"-P", strconv.Itoa(pipeline), "-r", strconv.Itoa(users), "--csv"}
	for _, a := range c.args {
		args = append(args, string(a))
	}
	ctx, cancel := context.WithTimeout(context.Background(), ceilingRunLimit)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("redis-benchmark %s: %v: %s%s", strings.Join(args, " "), err, out, stderr.Bytes())
	}
	rps, err := csvRPS(out)
	if err != nil {
		return 0, fmt.Errorf("redis-benchmark's output %q: %v", out, err)
	}
	return rps, nil
}

// rawRESP sends c from conns connections, pipeline commands to a
// pipeline, n in all, as redis-benchmark does: each connection writes a
// pipeline of pre-encoded commands, the 12 bytes of each __rand_int__
// overwritten with a random number below users, reads as many replies,
// and repeats while commands remain. It reads only the replies' framing
// and stops at an error reply. While it runs the process has one P
// (GOMAXPROCS 1), as redis-benchmark has one thread. It returns the
// commands answered per second.
func rawRESP(addr string, c ceilingCommand, conns, pipeline, n int) (float64, error) {
	one := fmt.Appendf(nil, "*%d\r\n", len(c.args))
	for _, a := range c.args {
		one = fmt.Appendf(one, "$%d\r\n", len(a))
		one = append(one, a...)
		one = append(one, "\r\n"...)
	}
	var holes []int // where each __rand_int__ starts in one
	for i := 0; ; {
		j := bytes.Index(one[i:], []byte(randInt))
		if j < 0 {
			break
		}
		holes = append(holes, i+j)
		i += j + len(randInt)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	fail := func(err error) { errOnce.Do(func() { firstErr = err }) }
	sockets := make([]net.Conn, conns)
	for i := range sockets {
		nc, err := net.Dial("tcp", addr)
		if err == nil {
			err = nc.SetDeadline(time.Now().Add(ceilingRunLimit))
		}
		if err != nil {
			for _, s := range sockets[:i] {
				s.Close()
			}
			return 0, err
		}
		sockets[i] = nc
	}
	start := time.Now()
	for i, nc := range sockets {
		wg.Go(func() {
			defer nc.Close()
			r := rand.New(rand.NewPCG(uint64(i), 16))
			batch := bytes.Repeat(one, pipeline)
			br := bufio.NewReaderSize(nc, 64<<10)
			for {
				claimed := int(next.Add(int64(pipeline)))
				if claimed-pipeline >= n {
					return
				}
				k := min(pipeline, n-(claimed-pipeline)) // the last batch may be short
				for j := range k {
					for _, h := range holes {
						at := batch[j*len(one)+h:]
						v := r.IntN(users)
						for d := len(randInt) - 1; d >= 0; d-- {
							at[d] = byte('0' + v%10)
							v /= 10
						}
					}
				}
				if _, err := nc.Write(batch[:k*len(one)]); err != nil {
					fail(err)
					return
				}
				for range k {
					if err := skipReply(br); err != nil {
						fail(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return 0, firstErr
	}
	return float64(n) / elapsed.Seconds(), nil
}

// skipReply reads one RESP2 reply from br, and returns an error reply as
// an error.
func skipReply(br *bufio.Reader) error {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return err
	}
	if len(line) < 3 {
		return errRESP
	}
	switch line[0] {
	case '+', ':':
		return nil
	case '-':
		return fmt.Errorf("redis: %s", bytes.TrimSpace(line[1:]))
	case '$', '*':
		n, err := strconv.Atoi(string(line[1 : len(line)-2]))
		if err != nil {
			return errRESP
		}
		if line[0] == '$' {
			if n >= 0 {
				_, err = br.Discard(n + 2)
			}
			return err
		}
		for range n {
			if err := skipReply(br); err != nil {
				return err
			}
		}
		return nil
	}
	return errRESP
}

// checkCeilingRun fails the test unless the server ran at least n EVALSHA
// since its statistics were reset, none failed, and on random keys none
// wrote the key with its __rand_int__ unreplaced.
func checkCeilingRun(t *testing.T, srv *redistest.Server, c ceilingCommand, n int) {
	t.Helper()
	calls, failed := evalshaStats(t, srv)
	if calls < int64(n) || failed > 0 {
		t.Fatalf("%s %s: the server ran %d EVALSHA, %d of them failed or rejected; want %d, none failed", c.script, c.workload, calls, failed, n)
	}
	if !strings.Contains(c.key, randInt) {
		return
	}
	r, err := srv.Do("EXISTS", c.key)
	if err != nil {
		t.Fatal(err)
	}
	if k, err := r.Int(); err != nil || k != 0 {
		t.Fatalf("%s %s: the key %q reached the server with its placeholder (EXISTS: %d, %v)", c.script, c.workload, c.key, k, err)
	}
}

// evalshaStats returns, from INFO commandstats, how many EVALSHA the
// server ran since its statistics were last reset, and how many of them
// failed or were rejected.
func evalshaStats(t *testing.T, srv *redistest.Server) (calls, failed int64) {
	t.Helper()
	info := redisfaults.Info(t, srv, "commandstats")
	calls = redisfaults.InfoCount(info, "cmdstat_evalsha", "calls")
	failed = redisfaults.InfoCount(info, "cmdstat_evalsha", "failed_calls") + redisfaults.InfoCount(info, "cmdstat_evalsha", "rejected_calls")
	return calls, failed
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
