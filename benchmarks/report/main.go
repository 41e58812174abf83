// Command report turns the raw results of `make bench-compare` into the
// tables and charts of docs/benchmarks.md.
//
// It reads, from the results folder, the benchmark output of each round
// (round-*.txt), the TSV files the tests wrote (overgrant.tsv,
// commands.tsv, ceiling.tsv) and env.txt, and rewrites the part of the
// document between the markers
//
//	<!-- bench-compare:begin -->
//	<!-- bench-compare:end -->
//
// and the charts' SVG files. Every figure is the median over the rounds; a
// ratio is computed within each round, then its median taken.
//
// Usage:
//
//	go run ./report -results results -doc ../docs/benchmarks.md -img ../docs/img
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

const (
	beginMarker = "<!-- bench-compare:begin -->"
	endMarker   = "<!-- bench-compare:end -->"
)

func main() {
	results := flag.String("results", "results", "the folder `make bench-compare` wrote")
	doc := flag.String("doc", "../docs/benchmarks.md", "the document whose generated section to rewrite")
	img := flag.String("img", "../docs/img", "the folder for the charts")
	flag.Parse()
	if err := run(*results, *doc, *img); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

func run(results, docPath, imgDir string) error {
	set, err := load(results)
	if err != nil {
		return err
	}
	section, charts := render(set, relPath(filepath.Dir(docPath), imgDir))
	doc, err := os.ReadFile(docPath)
	if err != nil {
		return err
	}
	doc, err = splice(doc, section)
	if err != nil {
		return fmt.Errorf("%s: %w", docPath, err)
	}
	if err := os.MkdirAll(imgDir, 0o755); err != nil {
		return err
	}
	for name, svg := range charts {
		if err := os.WriteFile(filepath.Join(imgDir, name), svg, 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(docPath, doc, 0o644)
}

// relPath is imgDir as the document links it: relative to the document's
// folder, with forward slashes.
func relPath(docDir, imgDir string) string {
	rel, err := filepath.Rel(docDir, imgDir)
	if err != nil {
		return filepath.ToSlash(imgDir)
	}
	return filepath.ToSlash(rel)
}

// splice replaces what lies between the markers in doc with section.
func splice(doc []byte, section string) ([]byte, error) {
	begin := bytes.Index(doc, []byte(beginMarker))
	end := bytes.Index(doc, []byte(endMarker))
	if begin < 0 || end < begin {
		return nil, errors.New("no " + beginMarker + " … " + endMarker + " section, in that order")
	}
	var out bytes.Buffer
	out.Write(doc[:begin+len(beginMarker)])
	out.WriteString("\n")
	out.WriteString(strings.TrimSpace(section))
	out.WriteString("\n")
	out.Write(doc[end:])
	return out.Bytes(), nil
}
