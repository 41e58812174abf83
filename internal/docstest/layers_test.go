package docstest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// architectureDoc declares the layers, from root.
const architectureDoc = "docs/architecture.md"

// module is the root module's path.
const module = "github.com/sluicehq/sluice"

// layerRow matches a row of the layers table: its number and its
// packages, each in backquotes.
var layerRow = regexp.MustCompile("^\\| (\\d+) \\| ((?:`[^`]+`(?:, )?)+) \\|")

// layers reads the table of docs/architecture.md's section on layers:
// each package pattern (relative to the module) and its layer.
func layers(doc string) (map[string]int, error) {
	_, section, ok := strings.Cut(doc, "\n## Layers")
	if !ok {
		return nil, errors.New(`no section "## Layers"`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	out := map[string]int{}
	for line := range strings.Lines(section) {
		m := layerRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		for p := range strings.SplitSeq(m[2], ", ") {
			out[strings.Trim(p, "`")] = n
		}
	}
	if len(out) == 0 {
		return nil, errors.New("the section on layers has no table")
	}
	return out, nil
}

// layerOf returns the layer of the package at path (relative to the
// module): the longest pattern that matches it wins.
func layerOf(table map[string]int, path string) (int, bool) {
	best, layer := -1, 0
	for p, n := range table {
		dir, tree := strings.CutSuffix(p, "/...")
		if path == dir || tree && strings.HasPrefix(path, dir+"/") {
			if len(dir) > best {
				best, layer = len(dir), n
			}
		}
	}
	return layer, best >= 0
}

// pkg is what `go list -json` says of a package that matters here.
type pkg struct {
	ImportPath string
	Imports    []string
}

// TestLayers fails on every import of the root module that does not run
// down the layers docs/architecture.md declares, and on every package it
// does not place.
func TestLayers(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(root, architectureDoc))
	if err != nil {
		t.Fatal(err)
	}
	table, err := layers(string(doc))
	if err != nil {
		t.Fatalf("%s: %v", architectureDoc, err)
	}
	cmd := exec.Command("go", "list", "-json", "./...")
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, v := range check(t, table, json.NewDecoder(strings.NewReader(string(out)))) {
		t.Error(v)
	}
}

// check returns what breaks the layers in the packages dec lists.
func check(t *testing.T, table map[string]int, dec *json.Decoder) []string {
	t.Helper()
	var broken []string
	rel := func(path string) (string, bool) {
		if path == module {
			return ".", true
		}
		r, ok := strings.CutPrefix(path, module+"/")
		return r, ok
	}
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		from, _ := rel(p.ImportPath)
		lf, ok := layerOf(table, from)
		if !ok {
			broken = append(broken, fmt.Sprintf("%s is in no layer of %s", from, architectureDoc))
			continue
		}
		for _, imp := range p.Imports {
			to, ours := rel(imp)
			if !ours {
				continue
			}
			lt, ok := layerOf(table, to)
			switch {
			case !ok:
				broken = append(broken, fmt.Sprintf("%s imports %s, which is in no layer", from, to))
			case lt == lf:
				broken = append(broken, fmt.Sprintf("%s (layer %d) imports %s of its own layer", from, lf, to))
			case lt > lf:
				broken = append(broken, fmt.Sprintf("%s (layer %d) imports %s (layer %d): up the layers", from, lf, to, lt))
			}
		}
	}
	return broken
}

// TestLayersCatchUpImports checks the check on a tree with an import that
// runs up, one across a layer and a package the table does not place.
func TestLayersCatchUpImports(t *testing.T) {
	table := map[string]int{"core": 1, "stores": 3, "stores/memstore": 5, "policy": 5, "internal/...": 9, "redistest": 8}
	list := `{"ImportPath": "github.com/sluicehq/sluice/policy", "Imports": ["context", "github.com/sluicehq/sluice/core", "github.com/sluicehq/sluice/stores/memstore"]}
{"ImportPath": "github.com/sluicehq/sluice/redistest", "Imports": ["github.com/sluicehq/sluice/internal/leakcheck"]}
{"ImportPath": "github.com/sluicehq/sluice/internal/cli", "Imports": ["github.com/sluicehq/sluice/stores"]}
{"ImportPath": "github.com/sluicehq/sluice/newpkg", "Imports": []}`
	got := check(t, table, json.NewDecoder(strings.NewReader(list)))
	want := []string{
		"policy (layer 5) imports stores/memstore of its own layer",
		"redistest (layer 8) imports internal/leakcheck (layer 9): up the layers",
		"newpkg is in no layer of " + architectureDoc,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("check found:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
