package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
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
		for _, want := range []string{"Usage: sluice sim [flags]", "-algorithm", "or all", "onoff:RATE,ON,OFF", "(default burst:60/1s)"} {
			if !strings.Contains(stdout.String(), want) {
				t.Errorf("sluice %q does not mention %q:\n%s", args, want, stdout.String())
			}
		}
	}
}

// TestDocs runs every `go run ./cmd/sluice sim` command that docs/sim.md and
// docs/algorithms.md show, from the repository's root as they do, and
// checks that the output they show under it is what it prints. A chart it
// draws under docs/img must be the committed file, byte for byte, and every
// sim chart there (docs/img/sim-*.svg) must be drawn by one of the commands
// and shown in docs/algorithms.md. go test -update redraws the charts.
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
			if want != "" && stdout != want {
				t.Errorf("%s shows under %s\n%s\nbut it prints\n%s", page, command, want, stdout)
			}
			if !strings.HasPrefix(chart, "docs/img/") {
				continue
			}
			drawn[chart] = true
			got, err := os.ReadFile(drawTo)
			if err != nil {
				t.Fatal(err)
			}
			if *update {
				if err := os.WriteFile(chart, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if committed, err := os.ReadFile(chart); err != nil || !bytes.Equal(got, committed) {
				t.Errorf("%s is not what %s draws today (read: %v); go test ./cmd/sluice -update redraws it", chart, command, err)
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
