package dbfaults

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
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redisfaults"
)

// The over-grant test hammers one key from several processes at once and
// counts what was admitted, as stores/redisstore's does. A bucket of
// burst b refilled at r a second admits at most b + ⌊r·w⌋ over any w
// seconds; a store that reads, decides and writes in separate steps
// admits far more.
//
// The store decides at the server's clock, so a decision's instant is
// known only to lie between the moment its call was sent, less MaxLag,
// and the moment its reply came back: admissions answered by the
// deadline were decided within [start, deadline], or from the first
// admission's instant if it is earlier, and are held to that bound
// exactly; all of them, to the bound over the window to the last
// admitted reply.

// The environment of NoOvergrantProcesses's workers.
const (
	workerEnv      = "DBFAULTS_OVERGRANT_WORKER" // "1" in a worker; empty in the parent
	workerDSNEnv   = "DBFAULTS_OVERGRANT_DSN"
	workerTableEnv = "DBFAULTS_OVERGRANT_TABLE"
	workerStartEnv = "DBFAULTS_OVERGRANT_START" // ns since the Unix epoch
	workerEndEnv   = "DBFAULTS_OVERGRANT_END"
	workerRecsEnv  = "DBFAULTS_OVERGRANT_RECORDS" // the file of the worker's records, as JSON
)

// workerReport is the worker's report, one line on stdout.
const workerReport = "overgrant-worker: admitted=%d late=%d decisions=%d last=%d\n"

// The run: 4 processes of 16 goroutines on one key, 100/s with a burst of
// 100, for 10 seconds.
const (
	procWorkers    = 4
	procGoroutines = 16
	procRate       = 100
	procWindow     = 10 * time.Second
	procLead       = 3 * time.Second // from launching the workers to the start
)

var procLimit = core.PerSecond(procRate).WithBurst(procRate)

// NoOvergrantProcesses runs the calling test's binary again as 4 worker
// processes of 16 goroutines on one key of one table, charging it from a
// common start for 10 s, and in each worker until it has seen a denial:
// together they may be admitted 100 + 100 a second at most, over the
// window from the first admission's instant to the deadline (those
// answered by it), or to the last admitted reply (all of them). Every
// admission, and a sample of the denials, is then replayed in the
// server's order against the token bucket's Go transition. Safety is
// asserted, not speed: a starved worker makes fewer calls, and the bounds
// and the replay hold however few.
//
// In the parent, start starts a server of the test's own and returns the
// DSN open connects to; in a worker (which the environment says), the
// test's body is the worker's, and start is not called. open returns a
// store on the table table of the server dsn names, closing what it
// opened when t ends. Call it as the whole of a test that is not
// parallel, so that the package's other tests do not compete with the
// workers for the machine's cores.
func NoOvergrantProcesses(t *testing.T, start func(t *testing.T) (dsn string), open func(t testing.TB, dsn, table string) core.Store) {
	t.Helper()
	if os.Getenv(workerEnv) != "" {
		overgrantWorker(t, open)
		return
	}
	dsn := start(t)
	const table = "overgrant"
	setup := open(t, dsn, table)
	if err := setup.Reset(context.Background(), "hot", algorithms.TokenBucket); err != nil { // creates the table
		t.Fatal(err)
	}
	setup.Close()
	begin := time.Unix(0, time.Now().Add(procLead).UnixNano())
	end := begin.Add(procWindow)
	ctx, cancel := context.WithDeadline(context.Background(), end.Add(90*time.Second))
	defer cancel()
	gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	recsDir := t.TempDir()
	type worker struct {
		cmd            *exec.Cmd
		stdout, stderr bytes.Buffer
		recs           string
	}
	workers := make([]*worker, procWorkers)
	for i := range workers {
		w := &worker{recs: filepath.Join(recsDir, fmt.Sprintf("worker-%d.json", i))}
		w.cmd = exec.CommandContext(ctx, os.Args[0],
			"-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v=true", "-test.timeout=120s")
		w.cmd.Env = append(os.Environ(),
			workerEnv+"=1",
			workerDSNEnv+"="+dsn,
			workerTableEnv+"="+table,
			workerStartEnv+"="+strconv.FormatInt(begin.UnixNano(), 10),
			workerEndEnv+"="+strconv.FormatInt(end.UnixNano(), 10),
			workerRecsEnv+"="+w.recs,
			"GORACE="+gorace,
		)
		w.cmd.Stdout, w.cmd.Stderr = &w.stdout, &w.stderr
		if err := w.cmd.Start(); err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
		workers[i] = w
	}
	var total redisfaults.Tally
	for i, w := range workers {
		err := w.cmd.Wait()
		var got redisfaults.Tally
		var lastNs int64
		reported := false
		for sc := bufio.NewScanner(bytes.NewReader(w.stdout.Bytes())); sc.Scan(); {
			if n, _ := fmt.Sscanf(sc.Text()+"\n", workerReport, &got.Admitted, &got.Late, &got.Decisions, &lastNs); n == 4 {
				reported = true
			}
		}
		if err != nil || !reported {
			t.Fatalf("worker %d (pid %d): %v, no report\nstdout:\n%s\nstderr:\n%s", i, w.cmd.Process.Pid, err, w.stdout.String(), w.stderr.String())
		}
		if lastNs != 0 {
			got.LastAdmit = time.Unix(0, lastNs)
		}
		data, err := os.ReadFile(w.recs)
		if err == nil {
			err = json.Unmarshal(data, &got.Records)
		}
		if err != nil {
			t.Fatalf("worker %d's records: %v", i, err)
		}
		t.Logf("worker %d: admitted %d (%d answered after the deadline) of %d decisions", i, got.Admitted, got.Late, got.Decisions)
		total.Add(got)
	}
	t.Logf("all workers: admitted %d (%d answered after the deadline) of %d decisions", total.Admitted, total.Late, total.Decisions)
	bound := func(span time.Duration) int64 { return procRate + procRate*int64(max(span, 0))/int64(time.Second) }
	// A decision's instant is the server's clock as the store estimates
	// it, which the server confirms lies within MaxLag before its own
	// (the bound doubled on each try): a call begun at the start may be
	// decided a little before it, and the key's bucket then starts
	// filling from that instant. The window opens at the first
	// admission's instant if it is earlier than the start.
	from := begin
	for _, r := range total.Records {
		if at := time.UnixMicro(r.At); r.Allowed && at.Before(from) {
			from = at
		}
	}
	t.Logf("the first admission was decided %v before the start", begin.Sub(from))
	if onTime, want := total.Admitted-total.Late, bound(end.Sub(from)); onTime > want {
		t.Errorf("admitted %d with a reply by the deadline, want at most %d: over-grant", onTime, want)
	}
	last := end
	if total.LastAdmit.After(last) {
		last = total.LastAdmit
	}
	if want := bound(last.Sub(from)); total.Admitted > want {
		t.Errorf("admitted %d in all, want at most %d (to the last admitted reply): over-grant", total.Admitted, want)
	}
	n, err := redisfaults.Replay(algorithms.TokenBucket, procLimit, total.Records)
	if err != nil {
		t.Errorf("replayed against the model: %v", err)
	}
	t.Logf("%d decisions of the four processes replayed against the model; %d admitted of at most %d over the window", n, total.Admitted, bound(last.Sub(from)))
}

// overgrantWorker is NoOvergrantProcesses in a worker process.
func overgrantWorker(t *testing.T, open func(t testing.TB, dsn, table string) core.Store) {
	startNs, err1 := strconv.ParseInt(os.Getenv(workerStartEnv), 10, 64)
	endNs, err2 := strconv.ParseInt(os.Getenv(workerEndEnv), 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	store := open(t, os.Getenv(workerDSNEnv), os.Getenv(workerTableEnv))
	defer store.Close()
	req := core.Request{Key: "hot", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: procLimit}}
	peek := req
	peek.Op = core.OpPeek
	if _, err := store.Apply(context.Background(), peek); err != nil { // connect before the start
		t.Fatal(err)
	}
	got, err := redisfaults.HammerUntilDenied(store, req, procGoroutines, time.Unix(0, startNs), time.Unix(0, endNs))
	if err != nil {
		t.Fatalf("%v (after %d decisions)", err, got.Decisions)
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
		t.Fatal(err)
	}
	fmt.Printf(workerReport, got.Admitted, got.Late, got.Decisions, last)
}
