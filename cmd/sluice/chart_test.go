package main

import (
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// svgCounts decodes the SVG file at path with encoding/xml, failing the
// test if it is not well-formed, and counts its elements by class.
func svgCounts(t *testing.T, path string) map[string]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := xml.NewDecoder(f)
	counts := map[string]int{}
	root := ""
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s is not well-formed XML: %v", path, err)
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		if root == "" {
			root = se.Name.Space + " " + se.Name.Local
		}
		for _, a := range se.Attr {
			if a.Name.Local == "class" {
				counts[se.Name.Local+"."+a.Value]++
			}
		}
	}
	if root != "http://www.w3.org/2000/svg svg" {
		t.Errorf("%s: root element %q, want svg in the SVG namespace", path, root)
	}
	return counts
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
			code, stdout, stderr := sim(t, append(tt.args, "-chart", path)...)
			if code != 0 {
				t.Fatalf("sim -chart = %d, stderr %q", code, stderr)
			}
			if !strings.HasSuffix(stdout, "chart written to "+path+"\n") {
				t.Errorf("stdout does not end with the chart's name:\n%s", stdout)
			}
			// One bar per interval, holding a rect for each of admitted
			// and rejected that is not zero.
			var wantAdmitted, wantRejected int
			cfg, err := parseSim(tt.args, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			res, err := simulate(cfg)
			if err != nil {
				t.Fatal(err)
			}
			for _, iv := range res.intervals {
				if iv.admitted > 0 {
					wantAdmitted++
				}
				if iv.rejected > 0 {
					wantRejected++
				}
			}
			counts := svgCounts(t, path)
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
