package limits

import (
	"strings"
	"testing"
)

// mustParse parses YAML documents named a.yaml, b.yaml, … and fails the
// test on error.
func mustParse(t testing.TB, opts Options, docs ...string) *Set {
	t.Helper()
	s, err := Parse(opts, files(docs...)...)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return s
}

// files names docs a.yaml, b.yaml, …, dedenting each: tests write their
// YAML indented with tabs, which YAML forbids.
func files(docs ...string) []File {
	var fs []File
	for i, d := range docs {
		fs = append(fs, File{Name: string(rune('a'+i)) + ".yaml", Data: []byte(dedent(d))})
	}
	return fs
}

// dedent removes the tabs that begin each line of s, and its first
// newline, so that line numbers count from the first line of YAML.
func dedent(s string) string {
	s = strings.TrimPrefix(s, "\n")
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimLeft(l, "\t")
	}
	return strings.Join(lines, "\n")
}

// e builds entries from key, value pairs.
func e(kv ...string) []Entry {
	var es []Entry
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, Entry{Key: kv[i], Value: kv[i+1]})
	}
	return es
}
