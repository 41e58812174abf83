package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
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
	res, err := simulate(cfg)
	if err != nil {
		t.Fatalf("simulate(%q): %v", args, err)
	}
	var got []int64
	for _, iv := range res.intervals {
		got = append(got, iv.admitted)
	}
	return got
}

func TestWorkedExampleGolden(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := sim(t)
	if code != 0 || stderr != "" {
		t.Fatalf("sluice sim = %d, stderr %q; want 0 and no stderr", code, stderr)
	}
	golden := filepath.Join("testdata", "worked-example.golden")
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
		t.Errorf("sluice sim printed\n%s\nwant (%s)\n%s", stdout, golden, want)
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
		// 5 at once, then 4 more refilled within the first 250ms.
		{"limit per 250ms", []string{"-limit", "5/250ms", "-burst", "5", "-traffic", "constant:100/s", "-duration", "1s", "-interval", "250ms"},
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
		{[]string{"-limit", "10"}, `-limit "10": want N/PERIOD`},
		{[]string{"-limit", "ten/s"}, `-limit "ten/s": count "ten" is not a whole number`},
		{[]string{"-limit", "10/fortnight"}, `period "fortnight" is not s, min, h, day or a Go duration`},
		{[]string{"-limit", "0/s"}, "invalid limit: rate 0 must be at least 1"},
		{[]string{"-limit", "10/500ns"}, "invalid limit: period must be at least 1µs"},
		{[]string{"-limit", "10/1500ns"}, "invalid limit: period must be a whole number of microseconds"},
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
		for _, want := range []string{"Usage: sluice sim [flags]", "-algorithm", "onoff:RATE,ON,OFF", "(default burst:60/1s)"} {
			if !strings.Contains(stdout.String(), want) {
				t.Errorf("sluice %q does not mention %q:\n%s", args, want, stdout.String())
			}
		}
	}
}
