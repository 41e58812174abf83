package compare

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/serve/internal/loadgen"
)

// The side-by-side run's settings, each from a SLUICE_COMPARE_*
// variable that ./run sets.
type sideSettings struct {
	rounds   int           // SLUICE_COMPARE_ROUNDS, default 3
	warmup   time.Duration // SLUICE_COMPARE_WARMUP, default 1s
	duration time.Duration // SLUICE_COMPARE_DURATION, default 3s
	out      string        // SLUICE_COMPARE_OUT, default docs/serve-compare.md
	command  string        // SLUICE_COMPARE_COMMAND: how the run was started, for the page
}

// The workload of every throughput run. One request in hotShare goes to
// one of hotUsers users, each limited to hotLimit requests a minute, who
// are soon denied; the others to one of coldUsers users whose limit
// (coldLimit) is never reached. Every server thus answers about the same
// share of denials however fast it is, and the hot users show whether it
// ever admits more than the limit.
const (
	benchDomain = "bench"
	hotUsers    = 100
	hotLimit    = 5  // per hot user per minute
	hotShare    = 10 // one request in hotShare is a hot user's
	coldUsers   = 10_000
	coldLimit   = 1_000_000 // per other user per minute
	tenantLimit = 100_000_000
	benchConns  = loadgen.DefaultConns
	runMargin   = 2 * time.Second // kept between a run's end and a minute's end
)

// benchConfig is the limits of the throughput runs and of the boundary
// scenario, in envoyproxy/ratelimit's format; extra, if not empty, is
// added to every rate_limit (sluice's "algorithm: token-bucket").
func benchConfig(extra string) string {
	var b strings.Builder
	limit := func(indent string, unit string, n int) {
		fmt.Fprintf(&b, "%srate_limit:\n%s  unit: %s\n%s  requests_per_unit: %d\n", indent, indent, unit, indent, n)
		if extra != "" {
			fmt.Fprintf(&b, "%s  %s\n", indent, extra)
		}
	}
	fmt.Fprintf(&b, "domain: %s\ndescriptors:\n", benchDomain)
	for _, u := range []struct {
		value string
		n     int
	}{{"hot*", hotLimit}, {"", coldLimit}} {
		b.WriteString("  - key: user\n")
		if u.value != "" {
			fmt.Fprintf(&b, "    value: %q\n", u.value)
		}
		limit("    ", "minute", u.n)
		b.WriteString("    descriptors:\n      - key: path\n")
		limit("        ", "minute", 2*u.n)
	}
	b.WriteString("  - key: tenant\n")
	limit("    ", "minute", tenantLimit)
	b.WriteString("  - key: edge\n")
	limit("    ", "second", edgeLimit)
	return b.String()
}

// The window-boundary scenario: one key limited to edgeLimit a second,
// sent to as fast as edgeStreams callers can from edgeLead before a
// second ends until edgeLead after.
const (
	edgeLimit   = 100
	edgeLead    = 200 * time.Millisecond
	edgeStreams = 16
	// The allotments contender's: -allot-all allotAll (every rule of at
	// least 100 × allotAll a unit: the users who are not hot, their
	// paths and the tenants), and the edge key in allotments of
	// edgeAllotment.
	allotAll      = 100
	edgeAllotment = 10
)

// benchAllotmentConfig is benchConfig("") with the edge rule given
// allotments of edgeAllotment.
func benchAllotmentConfig() string {
	return strings.Replace(benchConfig(""), fmt.Sprintf("requests_per_unit: %d\n", edgeLimit), fmt.Sprintf("requests_per_unit: %d\n      allotment: %d\n", edgeLimit, edgeAllotment), 1)
}

// contender is one server of the comparison.
type contender struct {
	name   string
	srv    *Server
	bucket bool // token bucket: L at once, then L per window length
	allot  bool // sluice-serve taking allotments (-allot-all)
}

// workload is one of the four measured loads.
type workload struct {
	descriptors, streams int
}

func (w workload) String() string {
	if w.descriptors == 1 {
		return fmt.Sprintf("one descriptor, %d streams", w.streams)
	}
	return fmt.Sprintf("%d descriptors, %d streams", w.descriptors, w.streams)
}

// runResult is one contender's figures for one workload in one round.
type runResult struct {
	res        loadgen.Result
	commands   Commands
	serverCPU  time.Duration
	redisCPU   time.Duration
	clientCPU  time.Duration // the test process's: the load generator's, mostly
	maxPerUser int64         // the most admissions a hot user got
	bound      float64       // the most the limit allows a hot user in the run
	overGrant  int64         // admissions beyond bound, over all hot users
	failOpen   int64         // OK answers without a limit: not decided by Redis
}

// edgeResult is one contender's boundary scenario in one round.
type edgeResult struct {
	before, after int64         // admissions answered before and after the boundary
	first, last   time.Time     // the first request sent, the last answer received
	span          time.Duration // last - first
	failOpen      int64         // OK answers without a limit, not counted as admissions
	errors        int64
}

// allowed is the most c's algorithm may admit in the scenario: a fixed
// window its limit in each second the span touched (two, unless the
// machine stalled the run), a token bucket its limit plus the refill over
// the span.
func (e edgeResult) allowed(c contender) float64 {
	if c.bucket {
		return math.Floor(edgeLimit + edgeLimit*e.span.Seconds())
	}
	return float64(edgeLimit * (e.last.Unix() - e.first.Unix() + 1))
}

// TestSideBySide measures envoyproxy/ratelimit, sluice-serve (fixed
// window, its default) and sluice-serve with token buckets on one
// redis-server with one load generator, alternating them round by round,
// and writes docs/serve-compare.md. It takes minutes, so it runs only
// with SLUICE_COMPARE=1: use ./run.
func TestSideBySide(t *testing.T) {
	if os.Getenv("SLUICE_COMPARE") != "1" {
		t.Skip("set SLUICE_COMPARE=1, or run serve/compare/run, to measure the servers side by side")
	}
	began := time.Now()
	host := machine(t)
	set := sideSettingsFromEnv(t)
	if _, err := SluiceBinary(); err != nil {
		t.Fatalf("%v", err)
	}
	r := redistest.Start(t)
	fixedConf, bucketConf := benchConfig(""), benchConfig("algorithm: token-bucket")
	contenders := []contender{
		{name: PeerName, srv: StartPeer(t, PeerConfig{Redis: r.Addr(), Config: fixedConf})},
		{name: SluiceName, srv: StartSluice(t, SluiceConfig{Redis: r.Addr(), Config: fixedConf})},
		{name: SluiceName + ", token bucket", srv: StartSluice(t, SluiceConfig{Redis: r.Addr(), Config: bucketConf}), bucket: true},
		{name: SluiceName + ", allotments", srv: StartSluice(t, SluiceConfig{Redis: r.Addr(), Config: benchAllotmentConfig(), Args: []string{"-allot-all", strconv.Itoa(allotAll)}}), allot: true},
	}
	workloads := []workload{{1, 64}, {1, 256}, {3, 64}, {3, 256}}

	runs := map[string][]runResult{} // by workload and contender
	edges := map[string][]edgeResult{}
	for round := range set.rounds {
		for wi, w := range workloads {
			for _, c := range rotate(contenders, round+wi) {
				prefix := fmt.Sprintf("r%dw%d%s-", round, wi, shortName(c))
				rr := measure(t, set, r, c, w, prefix)
				t.Logf("round %d, %v, %s: %v; Redis %s; over-grant %d; fail-open %d", round+1, w, c.name, rr.res, rr.commands.PerDecision(rr.res.Decisions()), rr.overGrant, rr.failOpen)
				runs[key(w, c)] = append(runs[key(w, c)], rr)
			}
		}
		for _, c := range rotate(contenders, round) {
			e := boundary(t, c, fmt.Sprintf("r%d%s", round, shortName(c)))
			t.Logf("round %d, boundary, %s: %d before, %d after, over %v", round+1, c.name, e.before, e.after, e.span)
			if n := e.before + e.after; float64(n) > e.allowed(c) {
				t.Errorf("round %d, boundary, %s: admitted %d in %v, more than the %.0f its algorithm allows", round+1, c.name, n, e.span, e.allowed(c))
			}
			edges[c.name] = append(edges[c.name], e)
		}
	}

	page := renderPage(set, contenders, workloads, runs, edges, time.Since(began), host)
	if err := os.WriteFile(set.out, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", set.out)
	for k, rs := range runs {
		for i, rr := range rs {
			if rr.overGrant > 0 {
				t.Errorf("%s, round %d: %d admissions over the limit (a user got %d, the limit allows %.1f)", k, i+1, rr.overGrant, rr.maxPerUser, rr.bound)
			}
			if rr.res.Errors > 0 {
				t.Errorf("%s, round %d: %d RPCs failed; the first: %v", k, i+1, rr.res.Errors, rr.res.FirstError)
			}
		}
	}
}

func sideSettingsFromEnv(t *testing.T) sideSettings {
	t.Helper()
	s := sideSettings{
		rounds:   3,
		warmup:   time.Second,
		duration: 3 * time.Second,
		out:      filepath.Join(moduleDir(), "..", "..", "docs", "serve-compare.md"),
		command:  "SLUICE_COMPARE=1 go test -run '^TestSideBySide$' ./serve/compare",
	}
	if v := os.Getenv("SLUICE_COMPARE_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SLUICE_COMPARE_ROUNDS=%q: want a positive number", v)
		}
		s.rounds = n
	}
	for _, d := range []struct {
		name string
		to   *time.Duration
	}{{"SLUICE_COMPARE_WARMUP", &s.warmup}, {"SLUICE_COMPARE_DURATION", &s.duration}} {
		if v := os.Getenv(d.name); v != "" {
			x, err := time.ParseDuration(v)
			if err != nil || x < 0 || (x == 0 && d.to == &s.duration) {
				t.Fatalf("%s=%q: want a duration", d.name, v)
			}
			*d.to = x
		}
	}
	if v := os.Getenv("SLUICE_COMPARE_OUT"); v != "" {
		s.out = v
	}
	if v := os.Getenv("SLUICE_COMPARE_COMMAND"); v != "" {
		s.command = v
	}
	if s.warmup+s.duration+runMargin >= time.Minute {
		t.Fatalf("warmup %v + duration %v must leave %v of a minute: a run must fit in one minute's window", s.warmup, s.duration, runMargin)
	}
	return s
}

// rotate returns cs starting at index n mod len(cs), so that each round
// runs the contenders in another order and none is always first.
func rotate(cs []contender, n int) []contender {
	n %= len(cs)
	return append(append([]contender(nil), cs[n:]...), cs[:n]...)
}

func shortName(c contender) string {
	switch {
	case c.name == PeerName:
		return "p"
	case c.bucket:
		return "b"
	case c.allot:
		return "a"
	default:
		return "s"
	}
}

func key(w workload, c contender) string { return w.String() + " / " + c.name }

// measure runs one workload against one contender with fresh users
// (prefix), within one minute's window, and reads the server's and
// Redis's CPU time and Redis's commands around the measurement.
func measure(t *testing.T, set sideSettings, r *redistest.Server, c contender, w workload, prefix string) runResult {
	t.Helper()
	hot, err1 := loadgen.Keyed(benchDomain, "hot-"+prefix, w.descriptors, hotUsers)
	cold, err2 := loadgen.Keyed(benchDomain, "cold-"+prefix, w.descriptors, coldUsers)
	if err := firstErr(err1, err2); err != nil {
		t.Fatal(err)
	}
	isHot := func(worker, i int) bool { return (worker+i)%hotShare == 0 }
	// A fixed window resets every user at the minute: a run that
	// crossed one could admit twice the limit. Start after the minute
	// if this one would end during the run.
	waitForRoom(set.warmup + set.duration + runMargin)

	admitted := make([]atomic.Int64, hotUsers)
	var failOpen atomic.Int64
	var (
		rr           runResult
		before       Commands
		cpu0, redis0 time.Duration
		client0      time.Duration
		sampleErr    error
	)
	sample := func(start bool) {
		cmds, err1 := CommandStats(r)
		cpu, err2 := c.srv.CPU()
		rcpu, err3 := ProcessCPU(r.PID())
		ccpu, err4 := ProcessCPU(os.Getpid())
		if err := firstErr(err1, err2, err3, err4); err != nil {
			sampleErr = err
			return
		}
		if start {
			before, cpu0, redis0, client0 = cmds, cpu, rcpu, ccpu
			return
		}
		rr.commands, rr.serverCPU, rr.redisCPU, rr.clientCPU = cmds.Sub(before), cpu-cpu0, rcpu-redis0, ccpu-client0
	}
	firstSend := time.Now()
	res, err := loadgen.Run(t.Context(), loadgen.Config{
		Addr:     c.srv.GRPCAddr,
		Streams:  w.streams,
		Conns:    benchConns,
		Warmup:   set.warmup,
		Duration: set.duration,
		Requests: func(worker, i int) *rlsv3.RateLimitRequest {
			if isHot(worker, i) {
				return hot.Requests(worker, i)
			}
			return cold.Requests(worker, i)
		},
		Prebuilt: []*loadgen.Workload{hot, cold},
		Observe: func(worker, i int, resp *rlsv3.RateLimitResponse) {
			if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				return
			}
			// Every descriptor of the workload has a limit; a
			// status without one is sluice's fail-open answer,
			// given when Redis did not answer in time.
			for _, st := range resp.GetStatuses() {
				if st.GetCurrentLimit() == nil {
					failOpen.Add(1)
					return
				}
			}
			if isHot(worker, i) {
				admitted[hot.Key(worker, i)].Add(1)
			}
		},
		Sample: sample,
	})
	if err != nil {
		t.Fatalf("%s: %v\n%s", c.name, err, c.srv.LogTail())
	}
	if sampleErr != nil {
		t.Fatal(sampleErr)
	}
	rr.res = res
	// Every user's requests were sent and answered between firstSend
	// and now, so in the run a fixed window admits at most the limit,
	// and a token bucket the limit (its burst) plus what it refilled
	// meanwhile.
	rr.bound = hotLimit
	if c.bucket {
		rr.bound = hotLimit + hotLimit*time.Since(firstSend).Seconds()/60
	}
	rr.failOpen = failOpen.Load()
	for u := range admitted {
		n := admitted[u].Load()
		rr.maxPerUser = max(rr.maxPerUser, n)
		if float64(n) > rr.bound {
			rr.overGrant += n - int64(math.Floor(rr.bound))
		}
	}
	return rr
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// waitForRoom returns at once if the current minute has need left, and
// otherwise sleeps until just after the next minute begins.
func waitForRoom(need time.Duration) {
	now := time.Now()
	end := now.Truncate(time.Minute).Add(time.Minute)
	if end.Sub(now) < need {
		time.Sleep(end.Sub(now) + 50*time.Millisecond)
	}
}

// boundary sends one fresh edge key requests as fast as edgeStreams
// callers can, from edgeLead before a second ends until edgeLead after,
// and counts the admissions answered on either side of the boundary.
func boundary(t *testing.T, c contender, value string) edgeResult {
	t.Helper()
	req := &rlsv3.RateLimitRequest{Domain: benchDomain, Descriptors: []*rlcommon.RateLimitDescriptor{d("edge=" + value)}}
	// The next second boundary at least edgeLead+100ms away.
	now := time.Now()
	b := now.Truncate(time.Second).Add(time.Second)
	if b.Sub(now) < edgeLead+100*time.Millisecond {
		b = b.Add(time.Second)
	}
	time.Sleep(time.Until(b.Add(-edgeLead)))
	var before, after, first, last, failOpen atomic.Int64
	res, err := loadgen.Run(context.Background(), loadgen.Config{
		Addr:     c.srv.GRPCAddr,
		Streams:  edgeStreams,
		Conns:    2,
		Duration: time.Until(b.Add(edgeLead)),
		Requests: func(worker, i int) *rlsv3.RateLimitRequest {
			first.CompareAndSwap(0, time.Now().UnixNano())
			return req
		},
		Observe: func(worker, i int, resp *rlsv3.RateLimitResponse) {
			now := time.Now()
			last.Store(now.UnixNano())
			if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				return
			}
			if sts := resp.GetStatuses(); len(sts) == 0 || sts[0].GetCurrentLimit() == nil {
				failOpen.Add(1)
				return
			}
			if now.Before(b) {
				before.Add(1)
			} else {
				after.Add(1)
			}
		},
	})
	if err != nil {
		t.Fatalf("%s: boundary: %v", c.name, err)
	}
	e := edgeResult{
		before:   before.Load(),
		after:    after.Load(),
		first:    time.Unix(0, first.Load()),
		last:     time.Unix(0, last.Load()),
		failOpen: failOpen.Load(),
		errors:   res.Errors,
	}
	e.span = e.last.Sub(e.first)
	return e
}
