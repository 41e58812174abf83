package limits

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// FuzzParse checks that Parse never panics, that every problem it reports
// names the file and a line of it, and that Match never panics on a
// configuration it accepts, whatever the request.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		dedent(shop), dedent(vtm), dedent(st),
		"domain: d\ndescriptors:\n  - key: k\n    value: v*\n    share_threshold: true\n    rate_limit: {limit: 10/s burst 5, algorithm: gcra}\n",
		"domain: d\ndescriptors: &l\n  - key: k\n    descriptors: *l\n",
		"domain: d\ndescriptors:\n  - &m {key: k, <<: *m}\n",
		"domain: d\n---\ndomain: e\n",
		"'''\n",
		"domain: [d]\n0.5: x\n",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 0x10, unlimited: no}\n",
	} {
		f.Add([]byte(seed), "k", "v")
	}
	f.Fuzz(func(t *testing.T, data []byte, key, value string) {
		s, err := Parse(Options{MergeDomains: len(data)%2 == 0}, File{Name: "f.yaml", Data: data})
		if err != nil {
			// YAML breaks lines at CR, LF, CRLF, NEL, LS and PS.
			lines := 2
			for _, b := range []string{"\n", "\r", "\u0085", "\u2028", "\u2029"} {
				lines += strings.Count(string(data), b)
			}
			var joined interface{ Unwrap() []error }
			if !errors.As(err, &joined) {
				t.Fatalf("Parse returned %T, not joined problems", err)
			}
			for _, p := range joined.Unwrap() {
				var pe *Error
				if !errors.As(p, &pe) || pe.File != "f.yaml" || pe.Line < 1 || pe.Line > lines {
					t.Fatalf("problem %q does not name f.yaml and a line of its %d", p, lines)
				}
			}
			return
		}
		rules := 0
		for _, domain := range s.Domains() {
			rules += check(t, s, domain, s.domains[domain], nil, key, value)
			s.Match(domain, []Entry{{key, value}})
			s.Match(domain, []Entry{{key, value}, {value, key}, {key, ""}})
		}
		if rules != s.Len() {
			t.Fatalf("Len() = %d, but the tree holds %d rules", s.Len(), rules)
		}
	})
}

// check matches a request for every descriptor below n, whose entries
// lead to n, and returns the number of rules there. Each request is
// built from a descriptor's composite key (a wildcard's completed with
// value), and once more with an entry of key and value added.
func check(t *testing.T, s *Set, domain string, n *node, entries []Entry, key, value string) int {
	rules := 0
	for composite, c := range n.children {
		k, v, _ := strings.Cut(composite, "_")
		if p, ok := strings.CutSuffix(v, "*"); ok {
			v = p + value
		}
		req := append(entries[:len(entries):len(entries)], Entry{k, v})
		m := s.Match(domain, req)
		if m.Rule != nil {
			if m.Key == "" || len(m.Key) > MaxKeyLen || !strings.HasPrefix(m.Metric, domain+".") {
				t.Fatalf("Match(%q, %v) = key %q, metric %q", domain, req, m.Key, m.Metric)
			}
			if m.Rule.Limit.Validate() != nil && !m.Rule.Deny {
				t.Fatalf("Match(%q, %v) found rule %s with an invalid limit", domain, req, m.Rule.Path)
			}
		}
		s.Match(domain, append(req, Entry{key, value}))
		if c.rule != nil {
			rules++
			if !strings.HasPrefix(c.rule.Path, domain+".") || c.rule.File != "f.yaml" || c.rule.Line < 1 {
				t.Fatalf("rule %+v", c.rule)
			}
		}
		if len(entries) < MaxDepth {
			rules += check(t, s, domain, c, req, key, value)
		}
	}
	return rules
}

// TestProblemLine checks the lines given to encoding errors, which the
// YAML parser reports without one.
func TestProblemLine(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		data string
		want int
	}{
		{"", 1},
		{"a: b\n", 1},
		{"a: b\nc: \xff\n", 2},
		{"a: b\n\nc: \x01\n", 3},
		{"a\n\u0085b\x7f", 2},
	} {
		if got := problemLine([]byte(tt.data)); got != tt.want {
			t.Errorf("problemLine(%s) = %d, want %d", strconv.Quote(tt.data), got, tt.want)
		}
	}
}
