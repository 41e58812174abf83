package main

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRun renders testdata/results, three rounds with known figures, into
// a document and checks the figures, the goals' verdicts, that nothing
// outside the markers changed, and that the charts are well-formed SVG.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	doc := filepath.Join(dir, "docs", "benchmarks.md")
	img := filepath.Join(dir, "docs", "img")
	os.MkdirAll(filepath.Dir(doc), 0o755)
	before, after := "# Benchmarks\n\nProse before.\n\n", "\n\nProse after.\n"
	if err := os.WriteFile(doc, []byte(before+beginMarker+"\nstale tables\n"+endMarker+after), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run("testdata/results", doc, img); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	got := string(data)
	if !strings.HasPrefix(got, before+beginMarker+"\n") || !strings.HasSuffix(got, endMarker+after) {
		t.Errorf("the text outside the markers changed:\n%s", got)
	}
	for _, want := range []string{
		"from 3 rounds",
		// rueidisstore ÷ redis_rate per round: 2.0, 2.1, 1.9.
		"| rueidisstore ≥ 2.0× redis_rate's decisions/s, hot key, 64 goroutines | 2.00× (1.90–2.10) | yes |",
		// redisstore: 1.2, 1.3, 1.25.
		"| redisstore ≥ 1.3× redis_rate, with ≤ 10 allocs per decision | 1.25× (1.20–1.30), 8 allocs | no |",
		// memstore ÷ go-limiter: 1.8, 1.6, 1.9 → 1.8.
		"1.80× at 64 goroutines",
		"| **sluice-rueidisstore** | – | – | 200,000 (2.00×) | – |",
		"| 1 goroutine | 16 goroutines |",
		"| **sluice-rueidisstore** | 5,000 | 2 | 50.0% | 0 | 5.0 | 1.000 |",
		"| hot | 70,000 | 250,000 | **sluice-rueidisstore**, 200,000 | 80% |",
		"| ref-3-commands | 400 | 40 | 900.00% | 80000 | 0 |",
		"| 0.00% over-grant for every sluice store | 0.00% at worst | yes |",
		"| **sluice-memstore** | 1 | 400 | 1.0 | 120 |",
		"- redis-server v=7.0.15",
		"](img/bench-redis-hot.svg)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the section lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "stale tables") {
		t.Error("the old section survived")
	}
	charts, _ := filepath.Glob(filepath.Join(img, "*.svg"))
	if len(charts) != 5 {
		t.Errorf("%d charts, want 5: %v", len(charts), charts)
	}
	for _, path := range charts {
		data, _ := os.ReadFile(path)
		if err := xml.Unmarshal(data, new(struct{})); err != nil {
			t.Errorf("%s: %v", path, err)
		}
	}
}

func TestRunErrors(t *testing.T) {
	dir := t.TempDir()
	doc := filepath.Join(dir, "benchmarks.md")
	os.WriteFile(doc, []byte("# no markers\n"), 0o644)
	if err := run("testdata/results", doc, dir); err == nil || !strings.Contains(err.Error(), "no "+beginMarker) {
		t.Errorf("a document without markers: %v", err)
	}
	if err := run(dir, doc, dir); err == nil || !strings.Contains(err.Error(), "no round-") {
		t.Errorf("a folder without results: %v", err)
	}
}

func TestParseBench(t *testing.T) {
	got, err := parseBench([]byte("BenchmarkX/a/g=1/x/time/rate+sync.Map-16 \t 100\t 12.5 ns/op\t 3 allocs/op\n" +
		"BenchmarkY-2 notanumber\nok  \tpkg\n"))
	if err != nil {
		t.Fatal(err)
	}
	m, ok := got["X/a/g=1/x/time/rate+sync.Map"]
	if len(got) != 1 || !ok || m["ns/op"] != 12.5 || m["allocs/op"] != 3 {
		t.Errorf("got %v", got)
	}
	if _, err := parseBench([]byte("BenchmarkZ-2 10 abc ns/op\n")); err == nil {
		t.Error("a figure that is not a number: no error")
	}
}
