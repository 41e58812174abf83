package redisstore_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redisfaults"
	"github.com/sluicehq/sluice/stores/memstore"
	"github.com/sluicehq/sluice/stores/redisstore"
	"github.com/sluicehq/sluice/stores/rueidisstore"
)

// The over-grant tests hammer one key from many callers at once and count
// what was admitted. A bucket of burst b refilled at r a second admits at
// most b + ⌊r·w⌋ over any w seconds, whatever the contention; a store that
// reads, decides and writes in separate steps admits far more.
//
// The stores decide at the server's clock (a request without Now), so a
// decision's instant is not known exactly, only that it lies between the
// moment its call was sent and the moment its reply came back. The tests
// therefore split the admissions in two:
//
//   - on time: the reply came back by the deadline, so the decision was
//     made within [start, deadline], and at most b + ⌊r·(deadline−start)⌋
//     of them can be admitted: exactly the bound, independent of the
//     machine's speed;
//   - late: the call was sent before the deadline but answered after it
//     (the machine was slow). All admissions together were decided within
//     [start, last admitted reply], which bounds the total.
//
// The lower bound holds as long as the key is hammered without a gap
// longer than a full bucket's worth of refill (b/r seconds).

// maxAdmitted is the most a bucket of burst refilled at perSecond admits
// within span: burst + ⌊perSecond·span⌋.
func maxAdmitted(burst, perSecond int64, span time.Duration) int64 {
	if span < 0 {
		span = 0
	}
	return burst + perSecond*int64(span)/int64(time.Second)
}

// checkAdmitted fails t unless got fits a bucket of burst refilled at
// perSecond hammered from start to end: at most the bound on the calls
// answered by end, at most the bound over [start, last admitted reply] on
// all, and at least the burst. Short of the bound less slack is logged: a
// machine that starved the callers leaves tokens unspent, which says
// nothing of the store.
func checkAdmitted(t *testing.T, got redisfaults.Tally, burst, perSecond int64, start, end time.Time, slack int64) {
	t.Helper()
	onTime := got.Admitted - got.Late
	if want := maxAdmitted(burst, perSecond, end.Sub(start)); onTime > want {
		t.Errorf("admitted %d with a reply by the deadline, want at most %d (burst %d + %d/s × %v): over-grant",
			onTime, want, burst, perSecond, end.Sub(start))
	}
	last := end
	if got.LastAdmit.After(last) {
		last = got.LastAdmit
	}
	if want := maxAdmitted(burst, perSecond, last.Sub(start)); got.Admitted > want {
		t.Errorf("admitted %d in all, want at most %d (burst %d + %d/s × %v, from the start to the last admitted reply): over-grant",
			got.Admitted, want, burst, perSecond, last.Sub(start))
	}
	// The most the key could admit is not a lower bound: a process the
	// machine did not run for a second lets the bucket fill past its
	// burst, and those tokens are lost to no fault of the store. Its
	// burst it admits whatever the machine does; that tokens were not
	// lost otherwise, the replay of the denials against the model shows.
	until := end
	if got.LastAdmit.Before(until) {
		until = got.LastAdmit
	}
	if most := maxAdmitted(burst, perSecond, until.Sub(start)) - slack; got.Admitted < burst {
		t.Errorf("admitted %d, want at least the burst, %d: the key was not hammered", got.Admitted, burst)
	} else if got.Admitted < most {
		t.Logf("admitted %d up to %v after the start, %d short of the most, %d: the process did not run throughout", got.Admitted, until.Sub(start), most-got.Admitted, most)
	}
}

// prefixFor returns a key prefix unique to t and to this run of it (-count
// runs a test again on the same shared server, where its keys may still
// live): t's name with anything but letters, digits, '-' and '/' replaced,
// so that it holds no brace.
func prefixFor(t *testing.T) string {
	name := strings.Map(func(r rune) rune {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9', r == '-', r == '/':
			return r
		}
		return '_'
	}, t.Name())
	return fmt.Sprintf("%s-%d:", name, prefixes.Add(1))
}

// newRedisStore returns a redisstore on a go-redis client of addr of its
// own, closed when the test ends.
func newRedisStore(t testing.TB, addr, prefix string) *redisstore.Store {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { client.Close() })
	store, err := redisstore.New(client, redisstore.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// newRueidisStore returns a rueidisstore on a rueidis client of addr of
// its own, closed when the test ends.
func newRueidisStore(t testing.TB, addr, prefix string) *rueidisstore.Store {
	t.Helper()
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	store, err := rueidisstore.New(client, rueidisstore.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// TestNoOvergrantGoroutines hammers one key with 64 goroutines for 3
// seconds under 10/s with a burst of 10, in each store, with the token
// bucket and GCRA at the store's clock: 10 + 10 × 3 = 40 at most, and at
// least 2 fewer up to the last admission (the first call lands a little
// after the start, and the last token may fall due just after the
// deadline).
//
// The six runs share one start and one deadline and run together, each on
// a key of its own: as parallel subtests, -test.parallel (GOMAXPROCS, 2
// here) would run them two at a time. The subtests then check and report
// each run.
func TestNoOvergrantGoroutines(t *testing.T) {
	t.Parallel()
	const (
		goroutines = 64
		rate       = 10 // per second, and the burst
		slack      = 2
		window     = 3 * time.Second
	)
	limit := core.PerSecond(rate).WithBurst(rate)
	stores := []struct {
		name string
		new  func(t *testing.T, prefix string) core.Store
	}{
		{"redisstore", func(t *testing.T, prefix string) core.Store { return newRedisStore(t, testAddr(t), prefix) }},
		{"rueidisstore", func(t *testing.T, prefix string) core.Store { return newRueidisStore(t, testAddr(t), prefix) }},
		{"memstore", func(t *testing.T, _ string) core.Store {
			store, err := memstore.New(memstore.Config{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { store.Close() })
			return store
		}},
	}
	type run struct {
		name  string
		store core.Store
		req   core.Request
		got   redisfaults.Tally
		err   error
	}
	var runs []*run
	for _, alg := range []core.Algorithm{algorithms.TokenBucket, algorithms.GCRA} {
		for _, s := range stores {
			r := &run{name: alg.Name() + "/" + s.name}
			// A prefix of the run's own (the server is shared), without
			// braces, and a fresh store for memstore.
			r.store = s.new(t, prefixFor(t)+r.name+":")
			r.req = core.Request{Key: "hot", Cost: 1, Terms: &core.Terms{Algorithm: alg, Limit: limit}}
			// Open a connection and load the script before the start,
			// without charging anything.
			peek := r.req
			peek.Op = core.OpPeek
			if d, err := r.store.Apply(context.Background(), peek); err != nil || !d.Allowed || d.Remaining != rate-1 {
				t.Fatalf("%s: Apply(peek) before the start = %+v, %v; want allowed with %d remaining (a full bucket)", r.name, d, err, rate-1)
			}
			runs = append(runs, r)
		}
	}
	start := time.Now()
	end := start.Add(window)
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Go(func() { r.got, r.err = redisfaults.Hammer(r.store, r.req, goroutines, start, end) })
	}
	wg.Wait()
	elapsed := time.Since(start)
	for _, r := range runs {
		t.Run(r.name, func(t *testing.T) {
			t.Logf("admitted %d (%d answered after the deadline) of %d decisions in %v (%.0f decisions/s)",
				r.got.Admitted, r.got.Late, r.got.Decisions, elapsed.Round(time.Millisecond), float64(r.got.Decisions)/elapsed.Seconds())
			if r.err != nil {
				t.Fatal(r.err)
			}
			checkAdmitted(t, r.got, rate, rate, start, end, slack)
			// Every admission, and a sample of the denials, replayed in
			// the store's order against the Go model (R-19's seq replay).
			n, err := redisfaults.Replay(r.req.Algorithm, limit, r.got.Records)
			if err != nil {
				t.Errorf("replayed against the model: %v", err)
			}
			t.Logf("%d decisions replayed against the model", n)
		})
	}
}

// The environment of TestNoOvergrantProcesses's workers.
const (
	workerEnv       = "SLUICE_OVERGRANT_WORKER"  // the store: "redisstore" or "rueidisstore"; empty in the parent
	workerAddrEnv   = "SLUICE_OVERGRANT_ADDR"    // the shared server's address
	workerPrefixEnv = "SLUICE_OVERGRANT_PREFIX"  // the key prefix all workers share
	workerStartEnv  = "SLUICE_OVERGRANT_START"   // the start instant, in ns since the Unix epoch
	workerEndEnv    = "SLUICE_OVERGRANT_END"     // the end instant, likewise
	workerRecsEnv   = "SLUICE_OVERGRANT_RECORDS" // the file the worker writes its decisions' records to, as JSON
)

// The worker's report, one line on stdout.
const (
	workerReport = "overgrant-worker: admitted=%d late=%d decisions=%d last=%d lag=%d\n" // lag: ns from the start to ready
	workerFailed = "overgrant-worker: FAILED: "
)

// The cross-process run: 4 processes of 16 goroutines on one key, 100/s
// with a burst of 100, for 10 seconds.
const (
	procWorkers    = 4
	procGoroutines = 16
	procRate       = 100 // per second, and the burst
	procWindow     = 10 * time.Second
	procLead       = 1500 * time.Millisecond // from launching the workers to the start
)

// TestNoOvergrantProcesses runs this test binary again as 4 worker
// processes, 2 deciding through redisstore and 2 through rueidisstore, on one key of the shared server under 100/s with a
// burst of 100. They start together at an instant the parent chose, stop
// 10 seconds later and report what they were admitted: 100 + 100 × 10 = 1100 at most in all,
// and at least 95% of what fell due up to the last admission.
//
// The test is not parallel, so that the package's other tests do not
// compete with the workers for the machine's cores: parallel tests wait
// until the serial ones are done. Its bounds would hold under any load
// (see checkAdmitted), but a starved worker makes fewer calls, and a slow
// start costs the lower bound.
func TestNoOvergrantProcesses(t *testing.T) {
	if kind := os.Getenv(workerEnv); kind != "" {
		overgrantWorker(t, kind)
		return
	}
	addr := testAddr(t)
	prefix := prefixFor(t)
	// Wall-clock instants, without a monotonic reading: the workers
	// compare their own clocks with them.
	start := time.Unix(0, time.Now().Add(procLead).UnixNano())
	end := start.Add(procWindow)

	ctx, cancel := context.WithDeadline(context.Background(), end.Add(60*time.Second))
	defer cancel()
	// Under the race detector a binary sleeps a second before it exits,
	// unless told not to.
	gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	type worker struct {
		kind           string
		cmd            *exec.Cmd
		stdout, stderr bytes.Buffer
	}
	workers := make([]*worker, procWorkers)
	recsDir := t.TempDir()
	recsFile := func(i int) string { return filepath.Join(recsDir, fmt.Sprintf("worker-%d.json", i)) }
	// A worker still running when the test ends, because the test failed
	// before waiting for it, is killed by its own handle.
	t.Cleanup(func() {
		for _, w := range workers {
			if w != nil && w.cmd.Process != nil && w.cmd.ProcessState == nil {
				w.cmd.Process.Kill()
				w.cmd.Wait()
			}
		}
	})
	for i := range workers {
		w := &worker{kind: [...]string{"redisstore", "rueidisstore"}[i%2]}
		// CommandContext kills the worker by its handle if it outlives
		// ctx; -test.timeout makes a hung worker panic with its stacks.
		w.cmd = exec.CommandContext(ctx, os.Args[0],
			"-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v=true", "-test.timeout=60s")
		w.cmd.Env = append(os.Environ(),
			workerEnv+"="+w.kind,
			workerAddrEnv+"="+addr,
			workerPrefixEnv+"="+prefix,
			workerStartEnv+"="+strconv.FormatInt(start.UnixNano(), 10),
			workerEndEnv+"="+strconv.FormatInt(end.UnixNano(), 10),
			workerRecsEnv+"="+recsFile(i),
			"GORACE="+gorace,
		)
		w.cmd.Stdout, w.cmd.Stderr = &w.stdout, &w.stderr
		if err := w.cmd.Start(); err != nil {
			t.Fatalf("worker %d (%s): %v", i, w.kind, err)
		}
		workers[i] = w
	}

	var total redisfaults.Tally
	var failed bool
	for i, w := range workers {
		err := w.cmd.Wait()
		var got redisfaults.Tally
		var lastNs, lagNs int64
		var reported bool
		sc := bufio.NewScanner(bytes.NewReader(w.stdout.Bytes()))
		for sc.Scan() {
			if n, _ := fmt.Sscanf(sc.Text()+"\n", workerReport, &got.Admitted, &got.Late, &got.Decisions, &lastNs, &lagNs); n == 5 {
				reported = true
			}
		}
		if err != nil || !reported {
			failed = true
			t.Errorf("worker %d (%s, pid %d): %v, no report\nstdout:\n%s\nstderr:\n%s",
				i, w.kind, w.cmd.Process.Pid, err, w.stdout.String(), w.stderr.String())
			continue
		}
		if lastNs != 0 {
			got.LastAdmit = time.Unix(0, lastNs)
		}
		ready := fmt.Sprintf("ready %v before the start", -time.Duration(lagNs).Round(time.Millisecond))
		if lagNs > 0 {
			ready = fmt.Sprintf("ready %v AFTER the start", time.Duration(lagNs).Round(time.Millisecond))
		}
		t.Logf("worker %d (%s, pid %d): admitted %d (%d answered after the deadline) of %d decisions; %s",
			i, w.kind, w.cmd.Process.Pid, got.Admitted, got.Late, got.Decisions, ready)
		data, err := os.ReadFile(recsFile(i))
		if err == nil {
			err = json.Unmarshal(data, &got.Records)
		}
		if err != nil {
			t.Errorf("worker %d's records: %v", i, err)
		}
		total.Add(got)
	}
	if failed {
		t.FailNow()
	}
	t.Logf("all workers: admitted %d (%d answered after the deadline) of %d decisions", total.Admitted, total.Late, total.Decisions)
	limit := int64(procRate) + procRate*int64(procWindow/time.Second)
	checkAdmitted(t, total, procRate, procRate, start, end, limit*5/100)
	// Every admission of the four processes, and a sample of their
	// denials, replayed in the server's order against the Go model.
	n, err := redisfaults.Replay(algorithms.TokenBucket, core.PerSecond(procRate).WithBurst(procRate), total.Records)
	if err != nil {
		t.Errorf("replayed against the model: %v", err)
	}
	t.Logf("%d decisions of the four processes replayed against the model", n)
}

// overgrantWorker is TestNoOvergrantProcesses in a worker process: it
// hammers the key through a store of kind from the start instant to the
// end one, and prints its report on stdout, or why it failed.
func overgrantWorker(t *testing.T, kind string) {
	fail := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		fmt.Println(workerFailed + msg)
		t.Fatal(msg)
	}
	addr, prefix := os.Getenv(workerAddrEnv), os.Getenv(workerPrefixEnv)
	startNs, err1 := strconv.ParseInt(os.Getenv(workerStartEnv), 10, 64)
	endNs, err2 := strconv.ParseInt(os.Getenv(workerEndEnv), 10, 64)
	if err := errors.Join(err1, err2); err != nil || addr == "" || prefix == "" {
		fail("bad environment: %s=%q %s=%q: %v", workerAddrEnv, addr, workerPrefixEnv, prefix, err)
	}
	start, end := time.Unix(0, startNs), time.Unix(0, endNs)
	var store core.Store
	switch kind {
	case "redisstore":
		store = newRedisStore(t, addr, prefix)
	case "rueidisstore":
		store = newRueidisStore(t, addr, prefix)
	default:
		fail("unknown store %q", kind)
	}
	req := core.Request{Key: "hot", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(procRate).WithBurst(procRate)}}
	// Connect and load the script before the start, without charging.
	peek := req
	peek.Op = core.OpPeek
	if _, err := store.Apply(context.Background(), peek); err != nil {
		fail("peek before the start: %v", err)
	}
	lag := time.Since(start) // negative when the worker was ready in time
	got, err := redisfaults.Hammer(store, req, procGoroutines, start, end)
	if err != nil {
		fail("%v (after %d decisions)", err, got.Decisions)
	}
	var last int64
	if !got.LastAdmit.IsZero() {
		last = got.LastAdmit.UnixNano()
	}
	recs, err := json.Marshal(got.Records)
	if err == nil {
		err = os.WriteFile(os.Getenv(workerRecsEnv), recs, 0o644)
	}
	if err != nil {
		fail("writing the records: %v", err)
	}
	fmt.Printf(workerReport, got.Admitted, got.Late, got.Decisions, last, lag)
}
