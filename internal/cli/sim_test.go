package cli

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// sim runs "sluice sim args..." in-process and returns its exit status and
// output.
func sim(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(append([]string{"sim"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

// admitted runs sim with args and returns the admitted count of each
// interval, failing the test if the command fails.
func admitted(t *testing.T, args ...string) []int64 {
	t.Helper()
	cfg, err := parseSim(args, new(bytes.Buffer))
	if err != nil {
		t.Fatalf("parseSim(%q): %v", args, err)
	}
	res, err := simulate(cfg, cfg.algs[0])
	if err != nil {
		t.Fatalf("simulate(%q): %v", args, err)
	}
	var got []int64
	for _, iv := range res.intervals {
		got = append(got, iv.admitted)
	}
	return got
}

// TestGolden compares what sim prints with the files in testdata; go test
// -update rewrites them.
func TestGolden(t *testing.T) {
	t.Parallel()
	boundary := "trace:" + filepath.Join("testdata", "boundary.trace")
	tests := []struct {
		golden string
		args   []string
	}{
		{"worked-example.golden", nil},
		{"comparison.golden", []string{"-algorithm", "all", "-traffic", "onoff:60/s,2s,3s", "-duration", "10s"}},
		// A list in the order given, with costs: the summary gains the
		// cost admitted.
		{"comparison-costs.golden", []string{"-algorithm", "sliding-window-log,fixed-window", "-burst", "0", "-traffic", boundary, "-interval", "500ms", "-cost", "2", "-limit", "20/s"}},
		// A fixed limit above the downstream's capacity: its queue, and
		// so its latency, grows without end.
		{"downstream.golden", []string{"-limit", "250/s burst 25", "-traffic", "constant:400/s", "-downstream", "200/s", "-duration", "10s"}},
		// The example of docs/sim.md, "Adapting to a downstream".
		{"adaptive.golden", adaptExample},
		{"adaptive-aimd.golden", append(slices.Clone(adaptExample[:len(adaptExample)-1]), "aimd")},
		// The example of docs/sim.md, "Shaping bursts".
		{"shaping.golden", shapingExample},
		// Both bounds, a burst of 2, a bucket: two leave at once, the
		// rest 1/r apart, and the wait refuses before the queue does.
		{"shaping-max-delay.golden", []string{"-limit", "4/s burst 2", "-traffic", "burst:12/2s", "-queue", "8", "-max-delay", "1s", "-duration", "4s", "-interval", "500ms"}},
	}
	for _, tt := range tests {
		t.Run(tt.golden, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := sim(t, tt.args...)
			if code != 0 || stderr != "" {
				t.Fatalf("sluice sim %s = %d, stderr %q; want 0 and no stderr", strings.Join(tt.args, " "), code, stderr)
			}
			golden := filepath.Join("testdata", tt.golden)
			if *update {
				if err := os.WriteFile(golden, []byte(stdout), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if stdout != string(want) {
				t.Errorf("sluice sim %s printed\n%s\nwant (%s)\n%s", strings.Join(tt.args, " "), stdout, golden, want)
			}
		})
	}
}

// The summary lines of one algorithm's table that parseSingle reads with a
// pattern.
var (
	sentLine = regexp.MustCompile(`^sent \d+, admitted (\d+ \(.*%\)), rejected (\d+)$`)
	outOf    = regexp.MustCompile(`out of (\d+)`)
	spaces   = regexp.MustCompile(`\s{2,}`)
)

// columns splits a line of a table that writeColumns printed into its
// cells: they are two or more spaces apart, and a cell holds at most one
// space in a row.
func columns(line string) []string {
	return spaces.Split(strings.TrimSpace(line), -1)
}

// singleRun is what a one-algorithm table says about its run, as printed.
type singleRun struct {
	intervals []string // the first column: each interval's span, then "total"
	admitted  []string // per interval, then the total
	summary   []string // admitted (share), rejected, most in one interval, per second
	cost      []string // the cost admitted and per second; nil without costs
	capacity  string
}

// parseSingle reads the table sim prints for one algorithm.
func parseSingle(t *testing.T, out string) singleRun {
	t.Helper()
	blocks := strings.Split(strings.TrimSuffix(out, "\n"), "\n\n")
	if len(blocks) != 3 {
		t.Fatalf("want a header, a table and a summary, found %d blocks:\n%s", len(blocks), out)
	}
	var r singleRun
	for _, line := range strings.Split(blocks[1], "\n")[1:] {
		cells := strings.Fields(line)
		r.intervals = append(r.intervals, cells[0])
		r.admitted = append(r.admitted, cells[2])
	}
	for _, line := range strings.Split(blocks[2], "\n") {
		if m := sentLine.FindStringSubmatch(line); m != nil {
			r.summary = append(r.summary, m[1], m[2])
			continue
		}
		switch {
		case strings.HasPrefix(line, "most admitted in one interval: "):
			r.summary = append(r.summary, strings.TrimPrefix(line, "most admitted in one interval: "))
		case strings.HasPrefix(line, "admitted per second over the run: "):
			v, _, _ := strings.Cut(strings.TrimPrefix(line, "admitted per second over the run: "), " ")
			r.summary = append(r.summary, v)
		case strings.HasPrefix(line, "cost admitted: "):
			v, ps, _ := strings.Cut(strings.TrimPrefix(line, "cost admitted: "), ", ")
			r.cost = []string{v, strings.TrimSuffix(ps, " per second")}
		case strings.HasPrefix(line, "level: "):
			if m := outOf.FindStringSubmatch(line); m != nil {
				r.capacity = m[1]
			}
		}
	}
	if len(r.summary) != 4 || r.capacity == "" {
		t.Fatalf("summary not understood:\n%s", blocks[2])
	}
	return r
}

// TestComparisonMatchesSingleRuns checks that every number a comparison
// prints for an algorithm is what sim prints for that algorithm alone.
func TestComparisonMatchesSingleRuns(t *testing.T) {
	t.Parallel()
	boundary := "trace:" + filepath.Join("testdata", "boundary.trace")
	tests := [][]string{
		{"-traffic", "onoff:60/s,2s,3s", "-duration", "10s"},
		{"-burst", "0", "-traffic", "constant:40/s", "-interval", "100ms"},
		{"-burst", "0", "-traffic", "onoff:100/s,200ms,1800ms", "-start", "2030-01-01T00:00:00.9Z", "-duration", "4s", "-interval", "50ms"},
		{"-traffic", boundary, "-interval", "250ms", "-cost", "3", "-limit", "30/s", "-burst", "40"},
		{"-traffic", "burst:7/300ms", "-duration", "2.5s", "-limit", "5/500ms"},
	}
	for _, args := range tests {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel()
			code, out, stderr := sim(t, append([]string{"-algorithm", "all"}, args...)...)
			if code != 0 {
				t.Fatalf("sim -algorithm all = %d, stderr %q", code, stderr)
			}
			blocks := strings.Split(strings.TrimSuffix(out, "\n"), "\n\n")
			if len(blocks) != 4 {
				t.Fatalf("want a header, two tables and notes, found %d blocks:\n%s", len(blocks), out)
			}
			table := strings.Split(blocks[1], "\n")
			summaries := strings.Split(blocks[2], "\n")
			header := columns(table[0])
			sumHeader := columns(summaries[0])
			if want := []string{"interval", "sent", "token-bucket", "gcra", "fixed-window", "sliding-window-counter", "sliding-window-log"}; !slices.Equal(header, want) {
				t.Fatalf("columns %q, want %q", header, want)
			}
			costs := slices.Contains(sumHeader, "cost admitted")
			for a, name := range header[2:] {
				_, single, stderr := sim(t, append([]string{"-algorithm", name}, args...)...)
				if stderr != "" {
					t.Fatalf("sim -algorithm %s: stderr %q", name, stderr)
				}
				want := parseSingle(t, single)
				var got singleRun
				for _, line := range table[1:] {
					cells := columns(line)
					got.intervals = append(got.intervals, cells[0])
					got.admitted = append(got.admitted, cells[2+a])
				}
				row := columns(summaries[1+a])
				if row[0] != name {
					t.Fatalf("summary row %d is %q's, want %q's", 1+a, row[0], name)
				}
				got.summary = row[1:5]
				if costs {
					got.cost = row[5:7]
				}
				got.capacity = row[len(row)-1]
				for _, c := range []struct {
					what      string
					got, want []string
				}{
					{"intervals", got.intervals, want.intervals},
					{"admitted per interval and total", got.admitted, want.admitted},
					{"summary", got.summary, want.summary},
					{"cost", got.cost, want.cost},
					{"capacity", []string{got.capacity}, []string{want.capacity}},
				} {
					if !slices.Equal(c.got, c.want) {
						t.Errorf("%s: comparison's %s %q, alone %q", name, c.what, c.got, c.want)
					}
				}
			}
		})
	}
}

func TestAlgorithmList(t *testing.T) {
	t.Parallel()
	tests := []struct {
		arg  string
		want []string
	}{
		// Concurrency limits leases, not a rate: all leaves it out.
		{"all", []string{"token-bucket", "gcra", "fixed-window", "sliding-window-counter", "sliding-window-log"}},
		{"gcra", []string{"gcra"}},
		{"sliding-window-log,token-bucket", []string{"sliding-window-log", "token-bucket"}},
		{"gcra, fixed-window", []string{"gcra", "fixed-window"}},
		// Named, it runs, as it does alone.
		{"token-bucket,concurrency", []string{"token-bucket", "concurrency"}},
	}
	for _, tt := range tests {
		cfg, err := parseSim([]string{"-algorithm", tt.arg}, io.Discard)
		if err != nil {
			t.Errorf("-algorithm %q: %v", tt.arg, err)
			continue
		}
		var got []string
		for _, alg := range cfg.algs {
			got = append(got, alg.Name())
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("-algorithm %q runs %q, want %q", tt.arg, got, tt.want)
		}
	}
}

func TestAdmittedPerInterval(t *testing.T) {
	t.Parallel()
	boundary := "trace:" + filepath.Join("testdata", "boundary.trace")
	tests := []struct {
		name string
		args []string
		want []int64
	}{
		// The worked example: the burst of 50 is spent at once, then
		// one request in six gets through.
		{"worked example", nil, []int64{50, 10, 10, 10, 10}},
		// The bucket refills while the burst is spent: 59, not 50.
		{"constant 60/s", []string{"-traffic", "constant:60/s"}, []int64{59, 10, 10, 10, 10}},
		// Three seconds of silence refill 30 tokens on top of the 1 left.
		{"onoff token bucket", []string{"-traffic", "onoff:60/s,2s,3s", "-duration", "10s"},
			[]int64{59, 10, 0, 0, 0, 40, 10, 0, 0, 0}},
		{"onoff fixed window", []string{"-traffic", "onoff:60/s,2s,3s", "-duration", "10s", "-algorithm", "fixed-window"},
			[]int64{10, 10, 0, 0, 0, 10, 10, 0, 0, 0}},
		{"gcra", []string{"-algorithm", "gcra"}, []int64{50, 10, 10, 10, 10}},
		{"fixed window", []string{"-algorithm", "fixed-window"}, []int64{10, 10, 10, 10, 10}},
		// Requests exactly at a boundary see the whole previous window.
		{"sliding window counter", []string{"-algorithm", "sliding-window-counter"}, []int64{10, 0, 10, 0, 10}},
		{"sliding window log", []string{"-algorithm", "sliding-window-log"}, []int64{10, 10, 10, 10, 10}},
		// The fixed window's known weakness: 20 admitted within 20ms.
		{"boundary fixed window", []string{"-algorithm", "fixed-window", "-traffic", boundary}, []int64{10, 10}},
		{"boundary sliding log", []string{"-algorithm", "sliding-window-log", "-traffic", boundary}, []int64{10, 0}},
		// A partial last interval.
		{"partial interval", []string{"-duration", "2.5s"}, []int64{50, 10, 10}},
		// A cost of 5 spends the burst of 50 ten times over.
		{"cost", []string{"-cost", "5"}, []int64{10, 2, 2, 2, 2}},
		{"burst is the rate", []string{"-burst", "0"}, []int64{10, 10, 10, 10, 10}},
		// -limit is core.Limit's text form: its burst is the rate unless
		// it names one, and -burst, when given, replaces it.
		{"limit with its burst", []string{"-limit", "10/s burst 20"}, []int64{20, 10, 10, 10, 10}},
		{"limit without a burst", []string{"-limit", "10/s"}, []int64{10, 10, 10, 10, 10}},
		{"limit per minute", []string{"-limit", "600/min burst 50"}, []int64{50, 10, 10, 10, 10}},
		{"-burst replaces the limit's", []string{"-limit", "10/s burst 20", "-burst", "30"}, []int64{30, 10, 10, 10, 10}},
		{"-burst 0 is the rate", []string{"-limit", "10/s burst 20", "-burst", "0"}, []int64{10, 10, 10, 10, 10}},
		// 5 at once, then 4 more refilled within the first 250ms.
		{"limit per 250ms", []string{"-limit", "5/250ms", "-burst", "5", "-traffic", "constant:100/s", "-duration", "1s", "-interval", "250ms"},
			[]int64{9, 5, 5, 5}},
		{"limit per 250ms, burst by default", []string{"-limit", "5/250ms", "-traffic", "constant:100/s", "-duration", "1s", "-interval", "250ms"},
			[]int64{9, 5, 5, 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := admitted(t, tt.args...); !slices.Equal(got, tt.want) {
				t.Errorf("sim %s: admitted %v, want %v", strings.Join(tt.args, " "), got, tt.want)
			}
		})
	}
}

func TestEveryAlgorithmRuns(t *testing.T) {
	t.Parallel()
	for _, alg := range []string{"token-bucket", "gcra", "fixed-window", "sliding-window-counter", "sliding-window-log"} {
		for _, traffic := range []string{"burst:60/1s", "constant:60/s", "onoff:60/s,2s,3s"} {
			t.Run(alg+"/"+traffic, func(t *testing.T) {
				t.Parallel()
				code, stdout, stderr := sim(t, "-algorithm", alg, "-traffic", traffic, "-interval", "500ms")
				if code != 0 {
					t.Fatalf("sim -algorithm %s -traffic %s = %d, stderr %q", alg, traffic, code, stderr)
				}
				if !strings.HasPrefix(stdout, alg+", 10 req/s (burst 50), traffic "+traffic+", 5s in intervals of 500ms\n") {
					t.Errorf("header: %q", strings.SplitN(stdout, "\n", 2)[0])
				}
				// Header and blank, column names, 10 intervals, total,
				// blank, 4 summary lines.
				if n := strings.Count(stdout, "\n"); n != 2+1+10+1+1+4 {
					t.Errorf("printed %d lines, want 19:\n%s", n, stdout)
				}
			})
		}
	}
}

func TestArrivals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		traffic string
		end     int64
		want    []int64
	}{
		// Integer spacing with the remainder carried: ⌊i × 1e6 / 3⌋.
		{"constant:3/s", 2e6, []int64{0, 333333, 666666, 1e6, 1333333, 1666666}},
		{"constant:2/1ms", 2000, []int64{0, 500, 1000, 1500}},
		{"burst:2/1s", 2e6 + 1, []int64{0, 0, 1e6, 1e6, 2e6, 2e6}},
		{"onoff:4/s,500ms,1s", 3e6, []int64{0, 250000, 1.5e6, 1.75e6}},
		{"onoff:4/s,600ms,400ms", 1.6e6, []int64{0, 250000, 500000, 1e6, 1.25e6, 1.5e6}},
	}
	for _, tt := range tests {
		p, err := parsePattern(tt.traffic)
		if err != nil {
			t.Fatalf("parsePattern(%q): %v", tt.traffic, err)
		}
		var got []int64
		for at, cost := range p.arrivals(tt.end, 7) {
			if cost != 7 {
				t.Errorf("%s: cost %d, want 7", tt.traffic, cost)
			}
			got = append(got, at)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s until %dµs: arrivals %v, want %v", tt.traffic, tt.end, got, tt.want)
		}
		if n := p.count(tt.end); n != uint64(len(got)) {
			t.Errorf("%s until %dµs: count = %d, want %d", tt.traffic, tt.end, n, len(got))
		}
	}
}

// TestCount checks each pattern's arithmetic count against its arrivals at
// many ends, including ends just before, at and after a request.
func TestCount(t *testing.T) {
	t.Parallel()
	tests := []struct {
		traffic    string
		last, step int64 // the ends tried, µs
	}{
		{"constant:3/s", 3e6, 29989},
		{"constant:7/1ms", 3e6, 29989},
		{"constant:3/1us", 3000, 29},
		{"burst:5/300ms", 3e6, 29989},
		{"onoff:7/s,700ms,300ms", 3e6, 29989},
		{"onoff:3/100ms,250ms,1s", 3e6, 29989},
	}
	for _, tt := range tests {
		p, err := parsePattern(tt.traffic)
		if err != nil {
			t.Fatalf("parsePattern(%q): %v", tt.traffic, err)
		}
		for end := int64(0); end <= tt.last; end += tt.step {
			for _, end := range []int64{end, end + 1, end + tt.last/9, end + tt.last/9 + 1} {
				var n uint64
				for range p.arrivals(end, 1) {
					n++
				}
				if got := p.count(end); got != n {
					t.Fatalf("%s: count(%d) = %d, want %d", tt.traffic, end, got, n)
				}
			}
		}
	}
}

func TestConstantSpacingStaysExact(t *testing.T) {
	t.Parallel()
	p, err := parsePattern("constant:7/s")
	if err != nil {
		t.Fatal(err)
	}
	var i int64
	for at := range p.arrivals(3600e6, 1) {
		if want := i * 1e6 / 7; at != want {
			t.Fatalf("request %d at %dµs, want %dµs", i, at, want)
		}
		i++
	}
	if i != 7*3600 {
		t.Errorf("%d requests in an hour, want %d", i, 7*3600)
	}
}

func TestReadTrace(t *testing.T) {
	t.Parallel()
	type req struct{ at, cost int64 }
	tests := []struct {
		name    string
		text    string
		want    []req
		wantErr string // substring; the file's name is prefixed
	}{
		{"durations and seconds", "0\n1.5s\n2\n250ms\n", []req{{0, -1}, {250000, -1}, {1.5e6, -1}, {2e6, -1}}, ""},
		{"costs", "1.5 3\n0.000001,2\n2s\t0\n", []req{{1, 2}, {1.5e6, 3}, {2e6, 0}}, ""},
		{"comments and blanks", "# a trace\n\n  \n1 # one\n\t# indented\n", []req{{1e6, -1}}, ""},
		{"sorted stably", "2 1\n1 2\n1 3\n0 4\n", []req{{0, 4}, {1e6, 2}, {1e6, 3}, {2e6, 1}}, ""},
		{"sub-microsecond truncated", "1.0000019\n", []req{{1000001, -1}}, ""},
		{"bad offset", "1s\n\nsoon\n", nil, ":3: offset \"soon\" is not a duration"},
		{"negative offset", "# c\n-1s\n", nil, ":2: offset \"-1s\" is negative"},
		{"bad cost", "1s\n2s many\n", nil, ":2: cost \"many\" is not a whole number"},
		{"negative cost", "1s -2\n", nil, ":1: cost \"-2\" is not a whole number"},
		{"too many columns", "1s 2 3\n", nil, ":1: want an offset and an optional cost, found 3 columns"},
		{"empty", "# nothing\n", nil, "no requests in the trace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "t.trace")
			if err := os.WriteFile(path, []byte(tt.text), 0o644); err != nil {
				t.Fatal(err)
			}
			p, err := readTrace(path)
			if tt.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), path) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("readTrace(%q) error = %v, want %s%s...", tt.text, err, path, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("readTrace(%q): %v", tt.text, err)
			}
			var got []req
			for _, r := range p.reqs {
				got = append(got, req(r))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("readTrace(%q) = %v, want %v", tt.text, got, tt.want)
			}
		})
	}
}

func TestTraceDuration(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "t.trace")
	if err := os.WriteFile(path, []byte("0 1\n0.5 2\n2.999 1\n3 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Without -duration the trace runs to the end of its last interval.
	code, stdout, stderr := sim(t, "-traffic", "trace:"+path)
	if code != 0 || stderr != "" {
		t.Fatalf("sim = %d, stderr %q", code, stderr)
	}
	if want := "traffic trace:" + path + " (4 requests), 4s in intervals of 1s\n"; !strings.Contains(stdout, want) {
		t.Errorf("header does not contain %q:\n%s", want, stdout)
	}
	if !strings.Contains(stdout, "cost admitted: 5,") {
		t.Errorf("summary does not report the cost admitted:\n%s", stdout)
	}
	// With a shorter -duration the rest is reported, not sent.
	code, stdout, stderr = sim(t, "-traffic", "trace:"+path, "-duration", "2s")
	if code != 0 || !strings.Contains(stderr, "2 trace requests at or after -duration 2s were not sent") {
		t.Fatalf("sim -duration 2s = %d, stderr %q", code, stderr)
	}
	if !strings.Contains(stdout, "\nsent 2, admitted 2 (100.0%), rejected 0\n") {
		t.Errorf("want 2 sent:\n%s", stdout)
	}
}

// adaptExample is the example of docs/sim.md: a limit adapted by the
// gradient law to a downstream whose capacity halves halfway. Its last
// argument is the law.
var adaptExample = []string{"-traffic", "constant:400/s", "-downstream", "200/s", "-capacity-change", "30s:100/s", "-duration", "60s", "-adapt", "gradient"}

// limitsDuring returns every limit, a second, that res's run was under
// from from to to: the one in force at from and each it changed to
// before to.
func limitsDuring(res *simResult, from, to time.Duration) []float64 {
	var got []float64
	for _, p := range res.limits {
		switch {
		case p.at <= from:
			got = []float64{p.rate}
		case p.at < to:
			got = append(got, p.rate)
		}
	}
	return got
}

// TestAdaptiveConverges runs adaptive mode on a virtual clock and checks
// that the adapted limit finds the downstream's capacity and follows it
// when it changes: over the last 10 s of each capacity, every limit the
// controller set is within ±15 % of the capacity, and the limit moved
// there from an initial limit far from it.
func TestAdaptiveConverges(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
	}{
		{"gradient, the docs' example", adaptExample},
		{"aimd, the docs' example", append(slices.Clone(adaptExample[:len(adaptExample)-1]), "aimd")},
		{"gradient, capacity rises", []string{"-traffic", "constant:400/s", "-downstream", "200/s", "-capacity-change", "30s:300/s", "-duration", "60s", "-adapt", "gradient"}},
		{"aimd, capacity rises", []string{"-traffic", "constant:400/s", "-downstream", "200/s", "-capacity-change", "30s:300/s", "-duration", "60s", "-adapt", "aimd"}},
		{"gradient from far above", []string{"-limit", "2000/s burst 200", "-traffic", "constant:400/s", "-downstream", "200/s", "-capacity-change", "30s:100/s", "-duration", "60s", "-adapt", "gradient"}},
		{"gradient, three capacities, a repeated flag", []string{"-traffic", "constant:400/s", "-downstream", "200/s", "-capacity-change", "20s:100/s", "-capacity-change", "40s:300/s", "-duration", "60s", "-adapt", "gradient"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := parseSim(tt.args, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			res, err := simulate(cfg, cfg.algs[0])
			if err != nil {
				t.Fatal(err)
			}
			ends := phaseEnds(cfg, res)
			if len(ends) != len(cfg.down.steps) {
				t.Fatalf("%d phase ends, want one per capacity, %d", len(ends), len(cfg.down.steps))
			}
			if first := res.limits[0].rate; math.Abs(first-ends[0].capacity)/ends[0].capacity < 0.5 {
				t.Fatalf("the limit starts at %v, within half of the capacity %v: the run proves nothing", first, ends[0].capacity)
			}
			for _, e := range ends {
				from := e.at - 10*time.Second
				for _, l := range limitsDuring(res, from, e.at) {
					if dev := (l - e.capacity) / e.capacity; math.Abs(dev) > 0.15 {
						t.Errorf("from %v to %v: limit %v/s, %+.1f%% from the capacity %v/s; want within ±15%%", from, e.at, l, 100*dev, e.capacity)
						break
					}
				}
				if math.Abs(e.deviation()) > 0.15 {
					t.Errorf("at %v: limit %v/s, want within ±15%% of %v/s", e.at, e.limit, e.capacity)
				}
			}
		})
	}
}

// TestDownstreamModel checks the downstream's latencies: flat below the
// capacity, growing with the queue above it, and the queue served at each
// capacity in force as it changes.
func TestDownstreamModel(t *testing.T) {
	t.Parallel()
	const base = 20 * time.Millisecond
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	tests := []struct {
		name     string
		steps    []capacityStep
		arrivals []int64 // µs
		want     []time.Duration
	}{
		// 100/s to a capacity of 200/s: each request is served before
		// the next arrives.
		{"below capacity", []capacityStep{{n: 200, period: 1e6}}, []int64{0, 10000, 20000, 30000}, []time.Duration{base, base, base, base}},
		// 400/s: each arrival finds half a request more queued, 2.5 ms
		// more to wait.
		{"above capacity", []capacityStep{{n: 200, period: 1e6}}, []int64{0, 2500, 5000, 7500}, []time.Duration{base, base + ms(2.5), base + ms(5), base + ms(7.5)}},
		// Four at once at 10/s: each waits 100 ms more than the last.
		{"at once", []capacityStep{{n: 10, period: 1e6}}, []int64{0, 0, 0, 0}, []time.Duration{base, base + ms(100), base + ms(200), base + ms(300)}},
		// Ten at once at 10/s, halved at 0.5 s: the last waits for nine,
		// five served by 0.5 s and four more at 5/s, 1.3 s in all.
		{"halved while waiting", []capacityStep{{n: 10, period: 1e6}, {at: 500000, n: 5, period: 1e6}}, []int64{0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
			[]time.Duration{base, base + ms(100), base + ms(200), base + ms(300), base + ms(400), base + ms(500), base + ms(700), base + ms(900), base + ms(1100), base + ms(1300)}},
		// Ten at once, then one at 1.2 s: 5 served by 0.5 s, 3.5 more by
		// 1.2 s, so 1.5 remain: 300 ms at 5/s.
		{"served across a change", []capacityStep{{n: 10, period: 1e6}, {at: 500000, n: 5, period: 1e6}}, []int64{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1200000},
			[]time.Duration{base, base + ms(100), base + ms(200), base + ms(300), base + ms(400), base + ms(500), base + ms(700), base + ms(900), base + ms(1100), base + ms(1300), base + ms(300)}},
		// Raised from 5/s to 50/s at 0.2 s: one served by then, the last
		// of three waits 20 ms more for the second.
		{"raised", []capacityStep{{n: 5, period: 1e6}, {at: 200000, n: 50, period: 1e6}}, []int64{0, 0, 0},
			[]time.Duration{base, base + ms(200), base + ms(220)}},
	}
	for _, tt := range tests {
		d := &downstream{cfg: &downstreamConfig{steps: tt.steps, base: base}}
		for i, at := range tt.arrivals {
			got := d.admit(at)
			if diff := got - tt.want[i]; diff < -time.Microsecond || diff > time.Microsecond {
				t.Errorf("%s: request %d at %dµs: latency %v, want %v", tt.name, i, at, got, tt.want[i])
			}
		}
	}
}

func TestCapacityChanges(t *testing.T) {
	t.Parallel()
	type step struct {
		at   int64
		rate float64
	}
	tests := []struct {
		values []string
		want   []step
	}{
		{[]string{"30s:100/s"}, []step{{30e6, 100}}},
		{[]string{"45s:50/s, 15s:300/s"}, []step{{15e6, 300}, {45e6, 50}}},
		{[]string{"40s:6000/min", "20s:1/10ms"}, []step{{20e6, 100}, {40e6, 100}}},
		{[]string{"1.5s:3/250ms"}, []step{{1.5e6, 12}}},
	}
	for _, tt := range tests {
		steps, err := parseCapacityChanges(tt.values, time.Minute)
		if err != nil {
			t.Errorf("%q: %v", tt.values, err)
			continue
		}
		var got []step
		for _, s := range steps {
			got = append(got, step{s.at, s.perSecond()})
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%q = %v, want %v", tt.values, got, tt.want)
		}
	}
	down := &downstreamConfig{steps: []capacityStep{{n: 200, period: 1e6}, {at: 30e6, n: 100, period: 1e6}}}
	for _, c := range []struct {
		at   int64
		want float64
	}{{0, 200}, {30e6 - 1, 200}, {30e6, 100}, {59e6, 100}} {
		if got := down.capacityAt(c.at); got != c.want {
			t.Errorf("capacityAt(%dµs) = %v, want %v", c.at, got, c.want)
		}
	}
	if got := down.meanCapacity(time.Minute); got != 150 {
		t.Errorf("meanCapacity(1m) = %v, want 150", got)
	}
}

func TestBadFlags(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "missing.trace")
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-algorithm", "leaky"}, `unknown algorithm "leaky"`},
		{[]string{"-algorithm", "gcra,leaky"}, `-algorithm "gcra,leaky": unknown algorithm "leaky"; want all, or one or more of token-bucket,`},
		{[]string{"-algorithm", ""}, `-algorithm "": empty name`},
		{[]string{"-algorithm", "gcra,"}, `-algorithm "gcra,": empty name`},
		{[]string{"-algorithm", "gcra,,token-bucket"}, "empty name"},
		{[]string{"-algorithm", "gcra,gcra"}, "gcra is named twice"},
		{[]string{"-algorithm", "all,gcra"}, "all names every algorithm and stands alone"},
		{[]string{"-algorithm", "ALL"}, `unknown algorithm "ALL"`},
		{[]string{"-limit", "20000/s", "-algorithm", "all"}, "-limit 20000/s with -algorithm sliding-window-log: "},
		{[]string{"-limit", "10"}, `-limit: sluice: invalid limit: "10": want N/PERIOD`},
		{[]string{"-limit", "ten/s"}, `-limit: sluice: invalid limit: "ten/s": rate "ten" is not a whole number`},
		{[]string{"-limit", "10/fortnight"}, `"10/fortnight": unknown unit "fortnight" (want s, min, h, day or a duration such as 250ms)`},
		{[]string{"-limit", "10/s burst"}, `"10/s burst": burst wants a number`},
		{[]string{"-limit", "10/s burst 0"}, `"10/s burst 0": burst 0 must be at least 1`},
		{[]string{"-limit", "0/s"}, `invalid limit: "0/s": rate 0 must be at least 1`},
		{[]string{"-limit", "10/500ns"}, `invalid limit: "10/500ns": period must be at least 1µs`},
		{[]string{"-limit", "10/1500ns"}, `invalid limit: "10/1500ns": period must be a whole number of microseconds`},
		{[]string{"-limit", "unlimited"}, "-limit unlimited: sim simulates a finite limit"},
		{[]string{"-limit", "10/s burst 5", "-burst", "-1"}, "-limit 10/s burst 5 -burst -1: sluice: invalid limit: burst -1 must be at least 1"},
		{[]string{"-limit", "20000/s", "-algorithm", "sliding-window-log"}, "the sliding window log keeps at most 10000 entries"},
		{[]string{"-burst", "-1"}, "invalid limit: burst -1 must be at least 1"},
		{[]string{"-burst", "lots"}, `-burst "lots": not a whole number`},
		{[]string{"-interval", "0s"}, `-interval "0s": must be positive`},
		{[]string{"-interval", "-1s"}, `-interval "-1s": must be positive`},
		{[]string{"-interval", "1.5µs"}, "must be a whole number of microseconds"},
		{[]string{"-duration", "soon"}, `-duration "soon": not a Go duration`},
		{[]string{"-interval", "10s"}, "-interval 10s is longer than -duration 5s"},
		{[]string{"-interval", "1ms", "-duration", "1h"}, "makes 3600000 intervals, more than 100000"},
		{[]string{"-traffic", "constant:100000000/s", "-duration", "1s"}, "sends 100000000 requests in 1s, more than 10000000"},
		{[]string{"-traffic", "burst:4503599627370496/1us", "-duration", "1h"}, "sends more than 2^64 requests in 1h"},
		{[]string{"-cost", "-1"}, `-cost "-1": not a whole number of at least 0`},
		{[]string{"-traffic", "steady"}, `-traffic "steady": want constant:RATE`},
		{[]string{"-traffic", "poisson:10/s"}, `unknown pattern "poisson"`},
		{[]string{"-traffic", "constant:0/s"}, "count must be between 1 and 2^52"},
		{[]string{"-traffic", "burst:10"}, `rate "10": want N/PERIOD`},
		{[]string{"-traffic", "onoff:60/s,2s"}, "want onoff:RATE,ON,OFF"},
		{[]string{"-traffic", "onoff:60/s,0s,3s"}, `ON "0s": must be positive`},
		{[]string{"-traffic", "trace:" + missing}, "missing.trace: no such file"},
		{[]string{"-start", "yesterday"}, `-start "yesterday": not an RFC 3339 instant`},
		{[]string{"-start", "1960-01-01T00:00:00Z"}, "before the Unix epoch"},
		{[]string{"-start", "2200-01-01T00:00:00Z"}, "the last instant sluice counts exactly"},
		{[]string{"-chart", "out.png"}, `-chart "out.png": sim writes SVG charts only`},
		{[]string{"-frobnicate"}, "flag provided but not defined: -frobnicate"},
		// The downstream model and adaptive mode.
		{[]string{"-downstream", "fast"}, `-downstream "fast": rate "fast": want N/PERIOD`},
		{[]string{"-downstream", "0/s"}, `-downstream "0/s": rate "0/s": count must be between 1 and 2^52`},
		{[]string{"-downstream", "200/s", "-downstream-latency", "0s"}, `-downstream-latency "0s": must be positive`},
		{[]string{"-downstream", "200/s", "-downstream-latency", "quick"}, `-downstream-latency "quick": not a Go duration`},
		{[]string{"-downstream", "200/s", "-capacity-change", "30s"}, `-capacity-change "30s": want AT:RATE, such as 30s:100/s`},
		{[]string{"-downstream", "200/s", "-capacity-change", "2s:100/s,later:50/s"}, `-capacity-change "later:50/s": instant "later": not a Go duration`},
		{[]string{"-downstream", "200/s", "-capacity-change", "0s:100/s"}, `-capacity-change "0s:100/s": instant "0s": must be positive`},
		{[]string{"-downstream", "200/s", "-capacity-change", "2s:many/s"}, `-capacity-change "2s:many/s": rate "many/s": count "many" is not a whole number`},
		{[]string{"-downstream", "200/s", "-capacity-change", "5s:100/s"}, `-capacity-change "5s:100/s": 5s is not before the end of the run, -duration 5s`},
		{[]string{"-downstream", "200/s", "-capacity-change", "2s:100/s", "-capacity-change", "2000ms:50/s"}, `-capacity-change "2s:100/s" and "2000ms:50/s": two capacities at one instant`},
		{[]string{"-downstream-latency", "5ms"}, "-downstream-latency needs -downstream"},
		{[]string{"-capacity-change", "2s:100/s"}, "-capacity-change needs -downstream"},
		{[]string{"-adapt", "gradient"}, "-adapt needs -downstream"},
		{[]string{"-downstream", "200/s", "-algorithm", "all"}, "-downstream models the service behind one limiter; -algorithm names 5 algorithms"},
		{[]string{"-downstream", "200/s", "-adapt", "vegas"}, `-adapt "vegas": unknown law; want aimd or gradient`},
		{[]string{"-downstream", "200/s", "-adapt", ""}, `-adapt "": unknown law`},
		{[]string{"-downstream", "200/s", "-adapt-interval", "1s"}, "-adapt-interval needs -adapt"},
		{[]string{"-downstream", "200/s", "-adapt-threshold", "40ms"}, "-adapt-threshold needs -adapt"},
		{[]string{"-downstream", "200/s", "-adapt", "gradient", "-adapt-interval", "500us"}, "-adapt-interval 500µs: want 1ms to 1h"},
		{[]string{"-downstream", "200/s", "-adapt", "gradient", "-adapt-interval", "soon"}, `-adapt-interval "soon": not a Go duration`},
		{[]string{"-downstream", "200/s", "-adapt", "gradient", "-adapt-threshold", "40ms"}, "-adapt-threshold sets a parameter of the aimd law, not of -adapt gradient"},
		{[]string{"-downstream", "200/s", "-adapt", "aimd", "-adapt-growth", "2"}, "-adapt-growth sets a parameter of the gradient law, not of -adapt aimd"},
		{[]string{"-downstream", "200/s", "-adapt", "aimd", "-adapt-threshold", "-1ms"}, `-adapt-threshold "-1ms": must be positive`},
		{[]string{"-downstream", "200/s", "-adapt", "aimd", "-adapt-increase", "0"}, `-adapt-increase "0": must be a positive number`},
		{[]string{"-downstream", "200/s", "-adapt", "gradient", "-adapt-growth", "NaN"}, `-adapt-growth "NaN": must be a positive number`},
		{[]string{"-downstream", "200/s", "-adapt", "gradient", "-adapt-growth", "fast"}, `-adapt-growth "fast": not a number`},
		{[]string{"-downstream", "200/s", "-adapt", "gradient", "-algorithm", "concurrency"}, "-adapt adapts a rate, and concurrency limits leases held"},
		{[]string{"-downstream", "200/s", "-adapt", "gradient", "-algorithm", "sliding-window-log", "-limit", "200/s"}, "-adapt gradient: the limit may grow to 100 times the initial rate, 20000 req/s (burst 20000), which sliding-window-log cannot take"},
		// Shaping mode.
		{[]string{"-queue", "0"}, `-queue "0": want a whole number of tokens from 1 to 2^52`},
		{[]string{"-queue", "-3"}, `-queue "-3": want a whole number of tokens from 1 to 2^52`},
		{[]string{"-queue", "lots"}, `-queue "lots": want a whole number of tokens`},
		{[]string{"-queue", "4503599627370497"}, `-queue "4503599627370497": want a whole number of tokens from 1 to 2^52`},
		{[]string{"-max-delay", "0s"}, `-max-delay "0s": must be positive`},
		{[]string{"-max-delay", "soon"}, `-max-delay "soon": not a Go duration`},
		{[]string{"-max-delay", "1.5us"}, `-max-delay "1.5us": must be a whole number of microseconds`},
		{[]string{"-queue", "5", "-algorithm", "fixed-window"}, "-queue shapes traffic with reservations, which fixed-window cannot make; use token-bucket or gcra"},
		{[]string{"-max-delay", "1s", "-algorithm", "sliding-window-log"}, "-max-delay shapes traffic with reservations, which sliding-window-log cannot make; use token-bucket or gcra"},
		{[]string{"-queue", "5", "-algorithm", "concurrency"}, "-queue shapes traffic with reservations, which concurrency cannot make"},
		{[]string{"-queue", "5", "-algorithm", "token-bucket,gcra"}, "-queue shapes the traffic of one limiter; -algorithm names 2 algorithms"},
		{[]string{"-max-delay", "1s", "-algorithm", "all"}, "-max-delay shapes the traffic of one limiter; -algorithm names 5 algorithms"},
		{[]string{"-queue", "5", "-downstream", "200/s"}, "-queue and -downstream: sim models a downstream behind a limiter that admits at once, not behind a line"},
		{[]string{"-max-delay", "1s", "-downstream", "200/s", "-adapt", "gradient"}, "-max-delay and -downstream"},
		{[]string{"-queue", "5", "-adapt", "gradient"}, "-adapt needs -downstream"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := sim(t, tt.args...)
			if code != 2 {
				t.Errorf("sim %q = %d, want 2", tt.args, code)
			}
			if stdout != "" {
				t.Errorf("sim %q printed to stdout: %q", tt.args, stdout)
			}
			if !strings.HasPrefix(stderr, "sluice sim: ") || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, tt.want) {
				t.Errorf("sim %q stderr = %q, want one line containing %q", tt.args, stderr, tt.want)
			}
		})
	}
}

func TestSimHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"sim", "-h"}, {"help", "sim"}} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 0 {
			t.Errorf("sluice %q = %d, want 0", args, code)
		}
		for _, want := range []string{"Usage: sluice sim [flags]", "-algorithm", "or all", "onoff:RATE,ON,OFF", "(default burst:60/1s)",
			"-downstream RATE", "-capacity-change AT:RATE", "-adapt law", "(default 100ms)",
			"-queue N", "-max-delay duration", "shapes the traffic"} {
			if !strings.Contains(stdout.String(), want) {
				t.Errorf("sluice %q does not mention %q:\n%s", args, want, stdout.String())
			}
		}
	}
}

// elidedMatch reports whether got is want, where each line of want that
// is "..." stands for one or more lines of got the page leaves out.
func elidedMatch(got, want string) bool {
	segments := [][]string{nil}
	for _, line := range strings.SplitAfter(want, "\n") {
		if line == "...\n" {
			segments = append(segments, nil)
			continue
		}
		segments[len(segments)-1] = append(segments[len(segments)-1], line)
	}
	lines := strings.SplitAfter(got, "\n")
	if len(segments) == 1 {
		return got == want
	}
	// The first segment starts the output and the last ends it; each
	// other is found at the first place it fits, at least a line after
	// the one before.
	first, last := segments[0], segments[len(segments)-1]
	if len(lines) < len(first) || !slices.Equal(lines[:len(first)], first) {
		return false
	}
	at := len(first)
	for _, seg := range segments[1 : len(segments)-1] {
		found := false
		for i := at + 1; i+len(seg) <= len(lines); i++ {
			if slices.Equal(lines[i:i+len(seg)], seg) {
				at, found = i+len(seg), true
				break
			}
		}
		if !found {
			return false
		}
	}
	start := len(lines) - len(last)
	return start >= at+1 && slices.Equal(lines[start:], last)
}

func TestElidedMatch(t *testing.T) {
	t.Parallel()
	got := "a\nb\nc\nd\ne\n"
	tests := []struct {
		want string
		ok   bool
	}{
		{got, true},
		{"a\n...\ne\n", true},
		{"a\n...\nc\n...\ne\n", true},
		{"a\nb\n...\nd\ne\n", true},
		{"...\nd\ne\n", true},
		{"a\nb\n...\n", true},
		{"a\n...\nb\nc\nd\ne\n", false}, // "..." leaves out at least a line
		{"a\nb\nc\nd\n...\ne\n", false},
		{"a\n...\nx\n...\ne\n", false},
		{"a\n...\nd\n", false},
		{"b\n...\ne\n", false},
		{"a\n...\nd\n...\nc\n", false},
		{"a\nb\nc\nd\n", false},
	}
	for _, tt := range tests {
		if ok := elidedMatch(got, tt.want); ok != tt.ok {
			t.Errorf("elidedMatch(%q, %q) = %v, want %v", got, tt.want, ok, tt.ok)
		}
	}
}

// TestDocs runs every `go run ./cmd/sluice sim` command that docs/sim.md and
// docs/algorithms.md show, from the repository's root as they do, and
// checks that the output they show under it is what it prints. A chart it
// draws whose name docs/img has must be that committed file, byte for
// byte (the commands write their charts where the reader runs them, not
// into docs/img), and every sim chart there (docs/img/sim-*.svg) must be
// drawn by one of the commands and shown in docs/algorithms.md. go test
// -update redraws the charts.
func TestDocs(t *testing.T) {
	// Not parallel: the commands run in the repository's root, and the
	// working directory is the process's.
	t.Chdir(filepath.Join("..", ".."))
	tmp := t.TempDir()
	const prompt = "$ go run ./cmd/sluice sim"
	drawn := map[string]bool{}
	for _, page := range []string{"docs/sim.md", "docs/algorithms.md"} {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for i, block := range strings.Split(string(text), "```console\n")[1:] {
			block, _, _ = strings.Cut(block, "```")
			command, want, _ := strings.Cut(block, "\n")
			if !strings.HasPrefix(command, prompt+" ") || strings.Contains(command, "[flags]") {
				continue
			}
			args := strings.Fields(strings.TrimPrefix(command, prompt))
			chart, drawTo := "", ""
			if j := slices.Index(args, "-chart"); j >= 0 && j+1 < len(args) {
				chart, drawTo = args[j+1], filepath.Join(tmp, fmt.Sprintf("%s-%d.svg", filepath.Base(page), i))
				args[j+1] = drawTo
			}
			code, stdout, stderr := sim(t, args...)
			if code != 0 {
				t.Errorf("%s: %s exits %d: %s", page, command, code, stderr)
				continue
			}
			if chart != "" {
				stdout = strings.ReplaceAll(stdout, drawTo, chart)
			}
			if want != "" && !elidedMatch(stdout, want) {
				t.Errorf("%s shows under %s\n%s\nbut it prints\n%s", page, command, want, stdout)
			}
			img := filepath.Join("docs", "img", filepath.Base(chart))
			if chart == "" {
				continue
			} else if _, err := os.Stat(img); err != nil {
				continue // a chart the docs do not show
			}
			drawn[img] = true
			got, err := os.ReadFile(drawTo)
			if err != nil {
				t.Fatal(err)
			}
			if *update {
				if err := os.WriteFile(img, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if committed, err := os.ReadFile(img); err != nil || !bytes.Equal(got, committed) {
				t.Errorf("%s is not what %s draws today (read: %v); go test ./internal/cli -update redraws it", img, command, err)
			}
		}
	}
	// sim's charts are docs/img/sim-*.svg; make bench-compare draws the
	// others.
	charts, err := filepath.Glob("docs/img/sim-*.svg")
	if err != nil || len(charts) == 0 {
		t.Fatalf("no sim charts in docs/img (%v)", err)
	}
	guide, err := os.ReadFile("docs/algorithms.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, chart := range charts {
		if !drawn[chart] {
			t.Errorf("%s: no command in the docs draws it", chart)
		}
		if !strings.Contains(string(guide), "](img/"+filepath.Base(chart)+")") {
			t.Errorf("%s: docs/algorithms.md does not show it", chart)
		}
	}
}

// shapingExample is the command line of docs/sim.md, "Shaping bursts":
// bursts of 30 every 2 s into a line of 20 in front of 10 a second.
var shapingExample = []string{"-algorithm", "gcra", "-limit", "10/s", "-burst", "1", "-traffic", "burst:30/2s", "-queue", "20", "-duration", "12s", "-interval", "1s"}

// TestShaping runs shaping mode on the virtual clock and checks the line
// against the bounds: with a burst of 1 the requests leave exactly 1/r
// apart (the gap between releases is never less); the line never holds
// more than -queue; a burst over burst + queue has exactly the excess
// refused; and every request admitted either left the line or is still
// in it at the end.
func TestShaping(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	tests := []struct {
		name     string
		args     []string
		admitted int64
		rejected int64
		maxLine  int64 // the longest line
		minGap   time.Duration
		maxGap   time.Duration
	}{
		// 30 at once: 1 passes, 20 wait 0.1 s to 2 s, 9 are refused.
		{"gcra, one burst over the queue", []string{"-algorithm", "gcra", "-limit", "10/s burst 1", "-traffic", "burst:30/10s", "-queue", "20", "-duration", "10s"},
			21, 9, 20, 100 * ms, 100 * ms},
		{"token bucket, one burst over the queue", []string{"-limit", "10/s burst 1", "-traffic", "burst:30/10s", "-queue", "20", "-duration", "10s"},
			21, 9, 20, 100 * ms, 100 * ms},
		// The docs' example: the first burst finds the bucket full, the
		// next five each find the last of the line just leaving.
		{"the docs' example", shapingExample, 21 + 5*20, 9 + 5*10, 20, 100 * ms, 100 * ms},
		// A burst of 5 leaves at once, then the line 1/r apart.
		{"token bucket, a burst of 5", []string{"-limit", "10/s burst 5", "-traffic", "burst:30/10s", "-queue", "10", "-duration", "10s"},
			15, 15, 10, 0, 100 * ms},
		// Waits of 0 to 1 s: 11 admitted.
		{"max delay", []string{"-algorithm", "gcra", "-limit", "10/s burst 1", "-traffic", "burst:30/10s", "-max-delay", "1s", "-duration", "10s"},
			11, 19, 10, 100 * ms, 100 * ms},
		// Both bounds: the queue of 5 refuses first.
		{"queue under max delay", []string{"-algorithm", "gcra", "-limit", "10/s burst 1", "-traffic", "burst:30/10s", "-queue", "5", "-max-delay", "1s", "-duration", "10s"},
			6, 24, 5, 100 * ms, 100 * ms},
		// Twice the rate, evenly: the line grows by one every 0.1 s
		// until it holds 20, then every other request is refused. One
		// leaves every 0.1 s from 0, 100 in the run, and 20 are in line
		// at its end: 120 of the 200 admitted.
		{"constant over the rate", []string{"-algorithm", "gcra", "-limit", "10/s burst 1", "-traffic", "constant:20/s", "-queue", "20", "-duration", "10s"},
			120, 80, 20, 100 * ms, 100 * ms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := parseSim(tt.args, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			res, err := simulate(cfg, cfg.algs[0])
			if err != nil {
				t.Fatal(err)
			}
			_, admitted, rejected := res.totals()
			if admitted != tt.admitted || rejected != tt.rejected {
				t.Errorf("admitted %d, rejected %d; want %d and %d", admitted, rejected, tt.admitted, tt.rejected)
			}
			if res.maxLine != tt.maxLine {
				t.Errorf("longest line %d, want %d", res.maxLine, tt.maxLine)
			}
			if cfg.shape.queue > 0 && res.maxLine > cfg.shape.queue {
				t.Errorf("longest line %d, more than -queue %d", res.maxLine, cfg.shape.queue)
			}
			if res.minGap != tt.minGap || res.maxGap != tt.maxGap {
				t.Errorf("gaps between releases from %v to %v, want %v to %v", res.minGap, res.maxGap, tt.minGap, tt.maxGap)
			}
			// Over any interval the releases stay within burst + rate ×
			// interval, and the line at its end within -queue.
			spacing := cfg.limit.Period() / time.Duration(cfg.limit.Rate())
			var released int64
			for _, iv := range res.intervals {
				if most := cfg.limit.Burst() + int64((iv.end-iv.start)/spacing); iv.released > most {
					t.Errorf("%s: released %d, more than burst + rate × interval, %d", span(iv), iv.released, most)
				}
				if cfg.shape.queue > 0 && iv.line > cfg.shape.queue {
					t.Errorf("%s: %d in line at the end, more than -queue %d", span(iv), iv.line, cfg.shape.queue)
				}
				released += iv.released
			}
			if released != res.releases || admitted != released+res.inLine {
				t.Errorf("admitted %d, released %d (counted %d), %d still in line: want admitted = released + in line",
					admitted, released, res.releases, res.inLine)
			}
		})
	}
}
