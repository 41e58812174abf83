package cli

import (
	"cmp"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms"
)

// svgCounts decodes the SVG file at path with encoding/xml, failing the
// test if it is not well-formed, and counts its elements by class. It also
// collects the text of the text and title elements by the class of their
// nearest ancestor (or themselves) that has one: texts["g.legend"] is the
// legend's words.
func svgCounts(t *testing.T, path string) (counts map[string]int, texts map[string][]string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := xml.NewDecoder(f)
	counts, texts = map[string]int{}, map[string][]string{}
	root := ""
	var classes []string // the class in force at each open element
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s is not well-formed XML: %v", path, err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = tok.Name.Space + " " + tok.Name.Local
			}
			class := ""
			if len(classes) > 0 {
				class = classes[len(classes)-1]
			}
			for _, a := range tok.Attr {
				if a.Name.Local == "class" {
					class = tok.Name.Local + "." + a.Value
					counts[class]++
				}
			}
			classes = append(classes, class)
		case xml.EndElement:
			classes = classes[:len(classes)-1]
		case xml.CharData:
			if s := strings.TrimSpace(string(tok)); s != "" && len(classes) > 0 {
				texts[classes[len(classes)-1]] = append(texts[classes[len(classes)-1]], s)
			}
		}
	}
	if root != "http://www.w3.org/2000/svg svg" {
		t.Errorf("%s: root element %q, want svg in the SVG namespace", path, root)
	}
	return counts, texts
}

// drawChart runs sim with args and -chart path, checks that it succeeded
// and said where the chart went, and returns the first algorithm's run of
// the same flags.
func drawChart(t *testing.T, args []string, path string) *simResult {
	t.Helper()
	code, stdout, stderr := sim(t, append(args, "-chart", path)...)
	if code != 0 {
		t.Fatalf("sim -chart = %d, stderr %q", code, stderr)
	}
	if !strings.HasSuffix(stdout, "chart written to "+path+"\n") {
		t.Errorf("stdout does not end with the chart's name:\n%s", stdout)
	}
	cfg, err := parseSim(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	res, err := simulate(cfg, cfg.algs[0])
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestChart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	trace := filepath.Join(dir, `a<b>&"c".trace`) // the title must escape it
	if err := os.WriteFile(trace, []byte("0\n0.1\n1.9\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		args      []string
		bars      int
		wantTitle string
	}{
		{"worked example", nil, 5, "token-bucket · 10 req/s (burst 50) · burst:60/1s"},
		{"600 intervals", []string{"-traffic", "onoff:60/s,2s,3s", "-duration", "60s", "-interval", "100ms"}, 600, ""},
		{"partial and escaped", []string{"-traffic", "trace:" + trace, "-duration", "2.5s", "-algorithm", "sliding-window-log", "-limit", "1/s"}, 3, ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(dir, "chart"+string(rune('a'+i))+".SVG")
			res := drawChart(t, tt.args, path)
			// One bar per interval, holding a rect for each of admitted
			// and rejected that is not zero.
			var wantAdmitted, wantRejected int
			for _, iv := range res.intervals {
				if iv.admitted > 0 {
					wantAdmitted++
				}
				if iv.rejected > 0 {
					wantRejected++
				}
			}
			counts, _ := svgCounts(t, path)
			if counts["g.bar"] != tt.bars || counts["rect.admitted"] != wantAdmitted || counts["rect.rejected"] != wantRejected {
				t.Errorf("%d bars, %d admitted and %d rejected rects; want %d, %d, %d",
					counts["g.bar"], counts["rect.admitted"], counts["rect.rejected"], tt.bars, wantAdmitted, wantRejected)
			}
			for _, class := range []string{"g.level", "g.legend", "g.x-axis", "g.left-axis", "g.right-axis"} {
				if counts[class] != 1 {
					t.Errorf("%d elements %s, want 1", counts[class], class)
				}
			}
			if tt.wantTitle != "" {
				b, _ := os.ReadFile(path)
				if !strings.Contains(string(b), "<title>"+tt.wantTitle+"</title>") {
					t.Errorf("chart has no title %q", tt.wantTitle)
				}
			}
		})
	}
}

func TestChartExtension(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, name := range []string{"chart.png", "chart.svg.gz", "chart"} {
		path := filepath.Join(dir, name)
		code, stdout, stderr := sim(t, "-chart", path)
		if code != 2 || stdout != "" || !strings.Contains(stderr, "sim writes SVG charts only") {
			t.Errorf("sim -chart %s = %d, stdout %q, stderr %q; want 2 and an SVG-only error", name, code, stdout, stderr)
		}
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("sim -chart %s created the file (stat: %v)", name, err)
		}
	}
}

func TestChartUnwritable(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "no", "such", "dir", "chart.svg")
	code, _, stderr := sim(t, "-chart", path)
	if code != 1 || !strings.HasPrefix(stderr, "sluice sim: -chart: ") {
		t.Errorf("sim -chart %s = %d, stderr %q; want 1 and a -chart error", path, code, stderr)
	}
}

func TestNiceStep(t *testing.T) {
	t.Parallel()
	tests := []struct {
		span float64
		n    int
		want float64
	}{
		{60, 5, 20}, {50, 5, 10}, {5, 10, 0.5}, {60, 10, 10}, {1, 5, 0.2}, {7, 5, 2}, {0, 5, 1}, {1000, 5, 200},
	}
	for _, tt := range tests {
		if got := niceStep(tt.span, tt.n); got != tt.want {
			t.Errorf("niceStep(%v, %d) = %v, want %v", tt.span, tt.n, got, tt.want)
		}
	}
}

func TestComparisonChart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	five := []string{"token-bucket", "gcra", "fixed-window", "sliding-window-counter", "sliding-window-log"}
	tests := []struct {
		name string
		args []string
		algs []string
		same []string // legend notes of runs that admitted just as an earlier one
	}{
		{"all", []string{"-algorithm", "all", "-traffic", "onoff:60/s,2s,3s", "-duration", "10s"}, five,
			[]string{"same as token-bucket", "same as fixed-window"}},
		{"two of 600 intervals", []string{"-algorithm", "fixed-window,token-bucket", "-traffic", "onoff:60/s,2s,3s", "-duration", "60s", "-interval", "100ms"},
			[]string{"fixed-window", "token-bucket"}, nil},
		{"concurrency named", []string{"-algorithm", "concurrency,sliding-window-log"}, []string{"concurrency", "sliding-window-log"},
			[]string{"same as concurrency"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(dir, "compare"+string(rune('a'+i))+".svg")
			res := drawChart(t, tt.args, path)
			var withSent int
			for _, iv := range res.intervals {
				if iv.sent > 0 {
					withSent++
				}
			}
			counts, texts := svgCounts(t, path)
			// One bar per interval, one sent rect where any was sent, one
			// line per algorithm named in its title, in the order given.
			if counts["g.bar"] != len(res.intervals) || counts["rect.sent"] != withSent {
				t.Errorf("%d bars and %d sent rects, want %d and %d", counts["g.bar"], counts["rect.sent"], len(res.intervals), withSent)
			}
			if got := texts["path.series"]; !slices.Equal(got, tt.algs) {
				t.Errorf("series %q, want %q", got, tt.algs)
			}
			for _, class := range []string{"g.algorithms", "g.legend", "g.x-axis", "g.left-axis"} {
				if counts[class] != 1 {
					t.Errorf("%d elements %s, want 1", counts[class], class)
				}
			}
			if counts["g.right-axis"] != 0 || counts["g.level"] != 0 {
				t.Errorf("a comparison has %d right axes and %d level lines, want none", counts["g.right-axis"], counts["g.level"])
			}
			legend := texts["g.legend"]
			for _, want := range append(append([]string{"sent"}, tt.algs...), tt.same...) {
				if !slices.Contains(legend, want) {
					t.Errorf("legend %q does not say %q", legend, want)
				}
			}
			if n := len(slices.DeleteFunc(slices.Clone(legend), func(s string) bool { return !strings.HasPrefix(s, "same as ") })); n != len(tt.same) {
				t.Errorf("legend %q has %d notes of runs the same as others, want %d", legend, n, len(tt.same))
			}
		})
	}
}

func TestSeriesColors(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	for _, alg := range append(algorithms.All(), algorithms.Concurrency) {
		c, ok := seriesColors[alg.Name()]
		if !ok {
			t.Errorf("%s has no colour", alg.Name())
		}
		if other, dup := seen[c]; dup {
			t.Errorf("%s and %s share the colour %s", alg.Name(), other, c)
		}
		seen[c] = alg.Name()
	}
}

// TestSteps checks the striping of lines that coincide: over each stretch,
// the dashes of the algorithms that share it tile it, each dash drawn by
// one of them.
func TestSteps(t *testing.T) {
	t.Parallel()
	cfg := &simConfig{duration: 3 * time.Second, interval: time.Second}
	// All three admit 5 in the first second, a and b in the second, b
	// alone in the third.
	admitted := map[string][]int64{"a": {5, 5, 2}, "b": {5, 5, 5}, "c": {5, 0, 0}}
	var results []*simResult
	for _, name := range []string{"a", "b", "c"} {
		res := &simResult{}
		for i, n := range admitted[name] {
			start := time.Duration(i) * time.Second
			res.intervals = append(res.intervals, interval{start: start, end: start + time.Second, sent: 5, admitted: n})
		}
		results = append(results, res)
	}
	c := newChart(io.Discard, comparisonFrame, cfg, results[0].intervals)
	type dash struct{ x0, x1 float64 }
	across := map[float64][]dash{} // by y
	piece := regexp.MustCompile(`M([0-9.]+),([0-9.]+)([HV])([0-9.]+)`)
	parse := func(s string) float64 {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for r := range results {
		d := c.steps(results, r)
		if rest := piece.ReplaceAllString(d, ""); rest != "" {
			t.Fatalf("steps(%d) = %q: not understood: %q", r, d, rest)
		}
		for _, m := range piece.FindAllStringSubmatch(d, -1) {
			if m[3] == "H" {
				y := parse(m[2])
				across[y] = append(across[y], dash{parse(m[1]), parse(m[4])})
			}
		}
	}
	third := (c.right - c.left) / 3
	tests := []struct {
		n        int64
		from, to float64 // where the lines at n run, pixels
		dashes   int     // at least
	}{
		{5, c.left, c.right, 3 + 2 + 1},   // all three, then a and b, then b alone
		{2, c.left + 2*third, c.right, 1}, // a alone
		{0, c.left + third, c.right, 1},   // c alone
	}
	for _, tt := range tests {
		ds := across[parse(num(c.yLeft(float64(tt.n))))]
		slices.SortFunc(ds, func(a, b dash) int { return cmp.Compare(a.x0, b.x0) })
		if len(ds) < tt.dashes {
			t.Errorf("at %d: %d dashes, want at least %d", tt.n, len(ds), tt.dashes)
			continue
		}
		at := tt.from
		for _, d := range ds {
			if math.Abs(d.x0-at) > 0.011 || d.x1 <= d.x0 {
				t.Errorf("at %d: dash %v-%v, want one from %v", tt.n, d.x0, d.x1, at)
			}
			at = d.x1
		}
		if math.Abs(at-tt.to) > 0.011 {
			t.Errorf("at %d: dashes end at %v, want %v", tt.n, at, tt.to)
		}
	}
}

// TestDownstreamChart checks the chart of a run with a downstream: a bar
// per interval, a right axis in requests per second, and the limit and
// the capacity as step lines, each drawn over a halo, whose steps are the
// limit's changes and the capacity's.
func TestDownstreamChart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct {
		name      string
		args      []string
		limitName string
		wantTitle string
	}{
		{"adapted", append(slices.Clone(adaptExample), "-interval", "2s"), "adapted limit",
			"token-bucket · limit adapted by gradient from 20 req/s (burst 2) · constant:400/s"},
		{"fixed", []string{"-limit", "250/s burst 25", "-traffic", "constant:400/s", "-downstream", "200/s", "-capacity-change", "2s:100/s,3s:300/s"}, "limit",
			"token-bucket · 250 req/s (burst 25) · constant:400/s"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(dir, fmt.Sprintf("down%d.svg", i))
			res := drawChart(t, tt.args, path)
			counts, texts := svgCounts(t, path)
			if counts["g.bar"] != len(res.intervals) {
				t.Errorf("%d bars, want %d", counts["g.bar"], len(res.intervals))
			}
			for _, class := range []string{"g.limit", "g.capacity", "g.legend", "g.x-axis", "g.left-axis", "g.right-axis"} {
				if counts[class] != 1 {
					t.Errorf("%d elements %s, want 1", counts[class], class)
				}
			}
			if counts["g.level"] != 0 {
				t.Errorf("%d level lines, want none: the right axis is the lines'", counts["g.level"])
			}
			if got := texts["g.limit"]; !slices.Equal(got, []string{tt.limitName}) {
				t.Errorf("limit line titled %q, want %q", got, tt.limitName)
			}
			for _, want := range []string{"admitted", "rejected", tt.limitName, "capacity"} {
				if !slices.Contains(texts["g.legend"], want) {
					t.Errorf("legend %q does not say %q", texts["g.legend"], want)
				}
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			svg := string(b)
			if !strings.Contains(svg, "<title>"+tt.wantTitle+"</title>") {
				t.Errorf("chart has no title %q", tt.wantTitle)
			}
			// Each line is a halo and the line over it, the same path,
			// with a vertical move for each change of its value.
			cfg, err := parseSim(tt.args, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			paths := regexp.MustCompile(`<g class="(limit|capacity)"[^>]*>.*\n<path d="([^"]*)"[^\n]*\n<path d="([^"]*)"`).FindAllStringSubmatch(svg, -1)
			if len(paths) != 2 {
				t.Fatalf("found %d lines of two paths, want 2", len(paths))
			}
			for _, m := range paths {
				changes := len(cfg.down.steps) - 1
				if m[1] == "limit" {
					changes = len(res.limits) - 1
				}
				if m[2] != m[3] {
					t.Errorf("%s: halo %q and line %q differ", m[1], m[2], m[3])
				}
				if n := strings.Count(m[3], "V"); n != changes {
					t.Errorf("%s: %d vertical moves, want %d, one for each change", m[1], n, changes)
				}
				end := "H" + num(singleFrame.right)
				if !strings.HasSuffix(m[3], end) {
					t.Errorf("%s: line %q does not run to the end of the plot, %s", m[1], m[3], end)
				}
			}
		})
	}
}

// TestShapingChart checks the chart of shaping mode: a bar per interval,
// the released requests as a step line over its halo, at each interval's
// count, and the line's length as a dashed line of a point per interval's
// end; no level, whose axis it does not draw.
func TestShapingChart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct {
		name string
		args []string
	}{
		{"the docs' example", shapingExample},
		// A line longer than any burst sent: the axis must reach it.
		{"a long line", []string{"-limit", "10/s burst 1", "-traffic", "constant:20/s", "-queue", "30", "-duration", "6s"}},
		// Releases that stop while the line is empty, then start again.
		{"a line that empties", []string{"-limit", "10/s burst 1", "-traffic", "burst:30/4s", "-queue", "20", "-duration", "8s"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(dir, fmt.Sprintf("shaping%d.svg", i))
			res := drawChart(t, tt.args, path)
			counts, texts := svgCounts(t, path)
			if counts["g.bar"] != len(res.intervals) {
				t.Errorf("%d bars, want %d", counts["g.bar"], len(res.intervals))
			}
			for _, class := range []string{"g.released", "g.line", "g.legend", "g.x-axis", "g.left-axis"} {
				if counts[class] != 1 {
					t.Errorf("%d elements %s, want 1", counts[class], class)
				}
			}
			if counts["g.level"] != 0 || counts["g.right-axis"] != 0 {
				t.Errorf("%d level lines and %d right axes, want none", counts["g.level"], counts["g.right-axis"])
			}
			for _, want := range []string{"admitted", "rejected", "released", "in line"} {
				if !slices.Contains(texts["g.legend"], want) {
					t.Errorf("legend %q does not say %q", texts["g.legend"], want)
				}
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			svg := string(b)
			// The left axis's top tick is at least the longest line at
			// an interval's end and the most sent.
			var most int64
			for _, iv := range res.intervals {
				most = max(most, iv.sent, iv.line)
			}
			ticks := texts["g.left-axis"]
			if top, err := strconv.ParseFloat(ticks[len(ticks)-2], 64); err != nil || top < float64(most) {
				t.Errorf("left axis up to %q, want at least %d", ticks[len(ticks)-2], most)
			}
			// The released line: its halo and itself, the same path, at
			// each interval's count in turn.
			m := regexp.MustCompile(`<g class="released"[^>]*>.*\n<path d="([^"]*)"[^\n]*\n<path d="([^"]*)"`).FindStringSubmatch(svg)
			if m == nil {
				t.Fatal("no released line of two paths")
			}
			if m[1] != m[2] {
				t.Errorf("halo %q and line %q differ", m[1], m[2])
			}
			ys := regexp.MustCompile(`(?:M[0-9.]+,|V)([0-9.]+)`).FindAllStringSubmatch(m[2], -1)
			if len(ys) != len(res.intervals) {
				t.Fatalf("released line %q has %d values, want one per interval, %d", m[2], len(ys), len(res.intervals))
			}
			for j := 1; j < len(ys); j++ {
				// Heights in proportion to the counts: the line falls
				// as far as the count rises.
				dy, _ := strconv.ParseFloat(ys[j][1], 64)
				dy0, _ := strconv.ParseFloat(ys[j-1][1], 64)
				want := float64(res.intervals[j].released - res.intervals[j-1].released)
				y0, y1 := singleFrame.bottom, singleFrame.top
				top, _ := strconv.ParseFloat(ticks[len(ticks)-2], 64)
				if got := (dy0 - dy) / (y0 - y1) * top; math.Abs(got-want) > 0.05 {
					t.Errorf("released line: %s to %s is a change of %.2f, want %v", ys[j-1][1], ys[j][1], got, want)
				}
			}
			// The line's length: a point at the start and at each
			// interval's end.
			pts := regexp.MustCompile(`<g class="line"[^>]*>.*\n<polyline points="([^"]*)"`).FindStringSubmatch(svg)
			if pts == nil || len(strings.Fields(pts[1])) != len(res.intervals)+1 {
				t.Errorf("in-line polyline %q, want %d points", pts, len(res.intervals)+1)
			}
		})
	}
}
