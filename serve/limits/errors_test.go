package limits

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// problems returns the messages of the problems err joins.
func problems(err error) []string {
	if err == nil {
		return nil
	}
	var out []string
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			out = append(out, e.Error())
		}
		return out
	}
	return []string{err.Error()}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		docs []string
		opts Options
		want []string
	}{
		{"bad unit", []string{`
			domain: d
			descriptors:
			  - key: user
			    rate_limit:
			      unit: minutes
			      requests_per_unit: 5
		`}, Options{}, []string{
			`a.yaml:5: descriptor "user": invalid rate limit unit "minutes" (want second, minute, hour, day, week, month or year)`,
		}},
		{"unit unknown to the service", []string{`
			domain: d
			descriptors:
			  - key: user
			    rate_limit: {unit: unknown, requests_per_unit: 5}
		`}, Options{}, []string{
			`a.yaml:4: descriptor "user": invalid rate limit unit "unknown" (want second, minute, hour, day, week, month or year)`,
		}},
		{"no unit", []string{`
			domain: d
			descriptors:
			  - key: user
			    rate_limit:
			      requests_per_unit: 5
		`}, Options{}, []string{
			`a.yaml:5: descriptor "user": rate_limit has no unit (want second, minute, hour, day, week, month or year), nor unlimited: true or a limit`,
		}},
		{"bad yaml", []string{"'''\n"}, Options{}, []string{
			`a.yaml:2: invalid YAML: found unexpected end of stream`,
		}},
		{"bad yaml later", []string{`
			domain: d
			descriptors:
			  - key: a
			   value: b
		`}, Options{}, []string{
			`a.yaml:2: invalid YAML: did not find expected '-' indicator`, // the parser's line
		}},
		{"invalid UTF-8", []string{"domain: d\ndescriptors:\n  - key: \xff\n"}, Options{}, []string{
			`a.yaml:3: invalid YAML: invalid leading UTF-8 octet`,
		}},
		{"duplicate domain", []string{"domain: d\n", "# another\ndomain: d\n"}, Options{}, []string{
			`b.yaml:2: domain "d" is declared twice (first at a.yaml:1); one file per domain, unless merging domains`,
		}},
		{"duplicate descriptor", []string{`
			domain: d
			descriptors:
			  - key: k
			    value: v
			  - key: k
			    value: v
		`}, Options{}, []string{
			`a.yaml:5: descriptor "k_v": declared twice (first at a.yaml:3)`,
		}},
		{"duplicate composite key", []string{`
			domain: d
			descriptors:
			  - key: a
			    value: b_c
			  - key: a_b
			    value: c
		`}, Options{}, []string{
			`a.yaml:5: descriptor "a_b_c": declared twice (first at a.yaml:3)`,
		}},
		{"duplicate descriptor across merged files", []string{
			"domain: d\ndescriptors:\n  - key: k\n",
			"domain: d\ndescriptors:\n  - key: j\n  - key: k\n",
		}, Options{MergeDomains: true}, []string{
			`b.yaml:4: descriptor "k": declared twice (first at a.yaml:3)`,
		}},
		{"empty domain", []string{`domain: ""`}, Options{}, []string{
			`a.yaml:1: domain is empty`,
		}},
		{"no domain", []string{"descriptors:\n"}, Options{}, []string{
			`a.yaml:1: the file has no domain`,
		}},
		{"empty file", []string{"# nothing\n"}, Options{}, []string{
			`a.yaml:1: the file has no domain; want a mapping with domain and descriptors`,
		}},
		{"long domain", []string{"domain: " + strings.Repeat("d", 129)}, Options{}, []string{
			`a.yaml:1: domain is 129 bytes, longer than 128`,
		}},
		{"empty key", []string{`
			domain: d
			descriptors:
			  - value: v
			  - key: ""
			    descriptors:
			      - key: ~
		`}, Options{}, []string{
			`a.yaml:3: a descriptor has an empty key`,
			`a.yaml:4: a descriptor has an empty key`,
			`a.yaml:6: descriptor "(no key)": a descriptor has an empty key`,
		}},
		{"long key and value", []string{"domain: d\ndescriptors:\n  - key: " + strings.Repeat("k", 257) + "\n    value: " + strings.Repeat("v", 513) + "\n"}, Options{}, []string{
			`a.yaml:3: key is 257 bytes, longer than 256`,
			`a.yaml:4: value is 513 bytes, longer than 512`,
		}},
		{"misspelled keys", []string{`
			domain: d
			descriptors:
			  - key: k
			    ratelimit:
			      unit: day
			  - key: j
			    rate_limit:
			      unit: day
			      requestsperunit: 5
			  - key: i
			    shadowmode: true
			    rate_limit: {unit: day, requests_per_units: 5}
			  - key: h
			    frobnicate: true
		`}, Options{}, []string{
			`a.yaml:4: descriptor "k": unknown key "ratelimit" (did you mean "rate_limit"?)`,
			`a.yaml:9: descriptor "j": unknown key "requestsperunit" (did you mean "requests_per_unit"?)`,
			`a.yaml:11: descriptor "i": unknown key "shadowmode" (did you mean "shadow_mode"?)`,
			`a.yaml:12: descriptor "i": unknown key "requests_per_units" (did you mean "requests_per_unit"?)`,
			`a.yaml:14: descriptor "h": unknown key "frobnicate"`,
		}},
		{"misplaced keys", []string{`
			domain: d
			unit: second
			descriptors:
			  - key: k
			    unit: minute
			    requests_per_unit: 5
			    rate_limit:
			      unit: second
			      requests_per_unit: 5
			      shadow_mode: true
			      key: x
			      replaces: [{name: a, unit: day}]
		`}, Options{}, []string{
			`a.yaml:2: key "unit" does not belong in the top level; it belongs in rate_limit`,
			`a.yaml:5: descriptor "k": key "unit" does not belong in a descriptor; it belongs in rate_limit`,
			`a.yaml:6: descriptor "k": key "requests_per_unit" does not belong in a descriptor; it belongs in rate_limit`,
			`a.yaml:10: descriptor "k": key "shadow_mode" does not belong in rate_limit; it belongs in a descriptor`,
			`a.yaml:11: descriptor "k": key "key" does not belong in rate_limit; it belongs in a descriptor`,
			`a.yaml:12: descriptor "k": key "unit" does not belong in a replaces entry; it belongs in rate_limit`,
		}},
		{"non-map list", []string{`
			domain: d
			descriptors:
			  - a
			  - [b]
			  - key: k
			    rate_limit:
			      unit: second
			      requests_per_unit: 1
			      replaces: [x]
		`}, Options{}, []string{
			`a.yaml:3: a descriptor is the string "a"; want a mapping with key, value, rate_limit or descriptors`,
			`a.yaml:4: a descriptor is a list; want a mapping with key, value, rate_limit or descriptors`,
			`a.yaml:9: descriptor "k": a replaces entry is the string "x"; want a mapping with a name`,
		}},
		{"non-string keys", []string{`
			0.25: d
			domain: d
			descriptors:
			  - key: k
			    1: x
			    yes: x
			    ~: x
			    [a]: x
		`}, Options{}, []string{
			`a.yaml:1: key 0.25 is a floating-point number; keys must be strings`,
			`a.yaml:5: descriptor "k": key 1 is an integer; keys must be strings`,
			`a.yaml:6: descriptor "k": key yes is a boolean; keys must be strings`,
			`a.yaml:7: descriptor "k": key ~ is null; keys must be strings`,
			`a.yaml:8: descriptor "k": a key is a list; keys must be strings`,
		}},
		{"wrong types", []string{`
			domain: [d]
			descriptors:
			  - key: {a: b}
			    value: 1.5
			    shadow_mode: "true"
			    detailed_metric: 1
			    descriptors: x
			  - key: k
			    value: 18446744073709551615
			    rate_limit: 5
			  - key: j
			    rate_limit:
			      unit: second
			      requests_per_unit: five
			  - key: i
			    rate_limit: {unit: second, requests_per_unit: -1}
			  - key: h
			    rate_limit: {unit: second, requests_per_unit: 4294967296}
			  - key: g
			    rate_limit: {unit: second, requests_per_unit: 2.5}
			  - key: f
			    rate_limit: {unit: second, requests_per_unit: "5"}
		`}, Options{}, []string{
			`a.yaml:1: domain is a list; want a string`,
			`a.yaml:3: key is a mapping; want a string`,
			`a.yaml:4: value is a floating-point number (1.5), which the rate limit service rejects; quote it to make it a string`,
			`a.yaml:3: a descriptor has an empty key`,
			`a.yaml:5: descriptor "(no key)": shadow_mode is the string "true"; want true or false`,
			`a.yaml:6: descriptor "(no key)": detailed_metric is an integer (1); want true or false`,
			`a.yaml:7: descriptor "(no key)": descriptors is the string "x"; want a list`,
			`a.yaml:9: value is an integer above 9223372036854775807 (18446744073709551615), which the rate limit service rejects; quote it to make it a string`,
			`a.yaml:10: descriptor "k": rate_limit is an integer (5); want a mapping`,
			`a.yaml:14: descriptor "j": requests_per_unit is the string "five"; want a whole number`,
			`a.yaml:16: descriptor "i": requests_per_unit -1 is out of range (0 to 4294967295)`,
			`a.yaml:18: descriptor "h": requests_per_unit 4294967296 is out of range (0 to 4294967295)`,
			`a.yaml:20: descriptor "g": requests_per_unit is a floating-point number (2.5); want a whole number`,
			`a.yaml:22: descriptor "f": requests_per_unit is the string "5"; want a whole number`,
		}},
		{"replaces", []string{`
			domain: d
			descriptors:
			  - key: k
			    rate_limit:
			      name: self
			      replaces:
			        - name:
			        - name: self
			        - {}
			        - name: other
			      unit: second
			      requests_per_unit: 5
		`}, Options{}, []string{
			`a.yaml:7: descriptor "k": a replaces entry has an empty name`,
			`a.yaml:8: descriptor "k": replaces its own name "self"`,
			`a.yaml:9: descriptor "k": a replaces entry has an empty name`,
		}},
		{"unlimited with unit", []string{`
			domain: d
			descriptors:
			  - key: k
			    rate_limit:
			      unlimited: true
			      unit: day
			      requests_per_unit: 25
			  - key: j
			    rate_limit: {unlimited: true, unit: fortnight}
		`}, Options{}, []string{
			`a.yaml:6: descriptor "k": unit "day" is given with unlimited: true; remove one`,
			`a.yaml:9: descriptor "j": invalid rate limit unit "fortnight" (want second, minute, hour, day, week, month or year)`,
		}},
		{"share_threshold misuse", []string{`
			domain: d
			descriptors:
			  - key: k
			    value: v
			    share_threshold: true
			    rate_limit: {unit: second, requests_per_unit: 1}
			  - key: j
			    share_threshold: true
			  - key: i
			    value: a*b
			    share_threshold: yes
		`}, Options{}, []string{
			`a.yaml:5: descriptor "k_v": share_threshold applies only to a wildcard value, one ending in "*"`,
			`a.yaml:8: descriptor "j": share_threshold applies only to a wildcard value, one ending in "*"`,
			`a.yaml:11: descriptor "i_a*b": share_threshold applies only to a wildcard value, one ending in "*"`,
		}},
		{"quota_mode", []string{`
			domain: d
			descriptors:
			  - key: k
			    quota_mode: true
			    rate_limit: {unit: second, requests_per_unit: 1}
		`}, Options{}, []string{
			`a.yaml:4: descriptor "k": quota_mode is not supported by sluice`,
		}},
		{"second document", []string{"domain: d\n---\ndomain: e\n"}, Options{}, []string{
			`a.yaml:2: a second YAML document; a configuration file holds one (the rate limit service would read only the first)`,
		}},
		{"top level", []string{"- domain: d\n"}, Options{}, []string{
			`a.yaml:1: the file is a list; want a mapping with domain and descriptors`,
		}},
		{"explicit tag", []string{"domain: !!binary ZA==\n"}, Options{}, []string{
			`a.yaml:1: domain: explicit YAML tag "!!binary" is not supported; remove it, or quote the value`,
		}},
		{"too deep", []string{nested(17)}, Options{}, []string{
			`a.yaml:34: descriptor "k1.k2.k3.k4.k5.k6.k7.k8.k9.k10.k11.k12.k13.k14.k15.k16": descriptors nest more than 16 deep`,
		}},
		{"alias cycle", []string{`
			domain: d
			descriptors: &list
			  - key: k
			    descriptors: *list
		`}, Options{}, []string{
			`a.yaml:4: descriptor "k.k.k.k.k.k.k.k.k.k.k.k.k.k.k.k": descriptors nest more than 16 deep`,
		}},
		{"merge key cycle", []string{`
			domain: d
			descriptors:
			  - &m
			    key: k
			    <<: *m
		`}, Options{}, []string{
			`a.yaml:5: descriptor "k": merge keys (<<) nested more than 8 deep`,
		}},

		{"algorithm", []string{`
			domain: d
			descriptors:
			  - key: k
			    rate_limit: {unit: second, requests_per_unit: 1, algorithm: leaky-bucket}
			  - key: j
			    rate_limit: {unit: second, requests_per_unit: 1, algorithm: concurrency}
			  - key: i
			    rate_limit: {unlimited: true, algorithm: gcra, burst: 5}
		`}, Options{}, []string{
			`a.yaml:4: descriptor "k": unknown algorithm "leaky-bucket" (want token-bucket, gcra, fixed-window, sliding-window-counter or sliding-window-log)`,
			`a.yaml:6: descriptor "j": algorithm "concurrency" limits concurrent leases, not a rate; it cannot be used here`,
			`a.yaml:8: descriptor "i": algorithm is given for an unlimited rule, which keeps no state`,
			`a.yaml:8: descriptor "i": burst is given for an unlimited rule`,
		}},
		{"burst", []string{`
			domain: d
			descriptors:
			  - key: k
			    rate_limit: {unit: second, requests_per_unit: 10, burst: 50}
			  - key: j
			    rate_limit: {limit: 10/s burst 50, algorithm: sliding-window-log}
			  - key: i
			    rate_limit: {limit: 10/s burst 50, algorithm: gcra, burst: 60}
			  - key: h
			    rate_limit: {unit: second, requests_per_unit: 10, burst: 0, algorithm: gcra}
			  - key: g
			    rate_limit: {unit: second, requests_per_unit: 0, burst: 5, algorithm: gcra}
			  - key: f
			    rate_limit: {unit: second, requests_per_unit: 10, burst: many, algorithm: gcra}
		`}, Options{}, []string{
			`a.yaml:4: descriptor "k": burst applies only to the token-bucket and gcra algorithms, not fixed-window`,
			`a.yaml:6: descriptor "j": a burst applies only to the token-bucket and gcra algorithms, not sliding-window-log`,
			`a.yaml:8: descriptor "i": burst is given twice, in limit and on its own`,
			`a.yaml:10: descriptor "h": burst 0 is out of range (1 to 4503599627370496)`,
			`a.yaml:12: descriptor "g": burst is given with requests_per_unit 0, which denies every request`,
			`a.yaml:14: descriptor "f": burst is the string "many"; want a whole number`,
		}},
		{"limit", []string{`
			domain: d
			descriptors:
			  - key: k
			    rate_limit: {limit: 10/s, unit: second}
			  - key: j
			    rate_limit: {limit: 10/s, unlimited: true}
			  - key: i
			    rate_limit: {limit: 10/fortnight}
			  - key: h
			    rate_limit: {limit: 0/s}
			  - key: g
			    rate_limit: {limit: ""}
		`}, Options{}, []string{
			`a.yaml:4: descriptor "k": limit is given with unit, requests_per_unit or unlimited; give limit alone, or those without it`,
			`a.yaml:6: descriptor "j": limit is given with unit, requests_per_unit or unlimited; give limit alone, or those without it`,
			`a.yaml:8: descriptor "i": invalid limit "10/fortnight": unknown unit "fortnight" (want s, min, h, day or a duration such as 250ms)`,
			`a.yaml:10: descriptor "h": invalid limit "0/s": rate 0 must be at least 1`,
			`a.yaml:12: descriptor "g": invalid limit "": empty; want N/PERIOD, such as 100/min or 10/s burst 50, or unlimited`,
		}},
		{"a bucket sluice cannot decide exactly", []string{`
			domain: d
			descriptors:
			  - key: k
			    rate_limit: {unit: year, requests_per_unit: 4294967291, algorithm: token-bucket}
		`}, Options{}, []string{
			`a.yaml:4: descriptor "k": invalid limit: 4294967291 req/8760h0m0s (burst 4294967291): burst × unit exceeds 2^52; lower the burst or use a rate that divides the period`,
		}},
	}
	for _, tt := range tests {
		_, err := Parse(tt.opts, files(tt.docs...)...)
		got := problems(err)
		if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
			t.Errorf("%s: Parse problems:\n\t%s\nwant:\n\t%s", tt.name, strings.Join(got, "\n\t"), strings.Join(tt.want, "\n\t"))
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: errors.Is(err, ErrInvalid) = false", tt.name)
		}
		var perr *Error
		if err != nil && (!errors.As(err, &perr) || perr.Line < 1 || perr.File == "") {
			t.Errorf("%s: errors.As(err, *Error) = %+v", tt.name, perr)
		}
	}
}

// nested returns a domain whose descriptors nest depth deep, each k<n>.
func nested(depth int) string {
	var b strings.Builder
	b.WriteString("domain: d\n")
	for i := 1; i <= depth; i++ {
		indent := strings.Repeat("    ", i-1)
		fmt.Fprintf(&b, "%sdescriptors:\n%s  - key: k%d\n", indent, indent, i)
	}
	return b.String()
}

func TestTooManyProblems(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n")
	for range 150 {
		b.WriteString("  - value: v\n")
	}
	_, err := Parse(Options{}, File{Name: "a.yaml", Data: []byte(b.String())})
	got := problems(err)
	if len(got) != maxErrors+1 || got[maxErrors] != "a.yaml:103: and 50 more problems" {
		t.Errorf("Parse of 150 problems: %d problems, the last %q", len(got), got[len(got)-1])
	}
}

func TestTooLarge(t *testing.T) {
	t.Parallel()
	// A billion laughs: each descriptor nests the one before ten times,
	// by alias.
	var b strings.Builder
	b.WriteString("domain: d\nl0: &l0 {key: a}\n")
	for i := 1; i < 10; i++ {
		fmt.Fprintf(&b, "l%d: &l%d {key: k%d, descriptors: [*l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d]}\n", i, i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	b.WriteString("descriptors: [*l9]\n")
	_, err := Parse(Options{}, File{Name: "a.yaml", Data: []byte(b.String())})
	got := problems(err)
	if len(got) == 0 || !strings.Contains(got[len(got)-1], "and ") {
		t.Fatalf("Parse of a billion laughs: %q", got)
	}
	for _, p := range got {
		if strings.Contains(p, "too large: more than 131072 descriptors") {
			return
		}
	}
	t.Errorf("Parse of a billion laughs did not say it is too large: %q", got)
}

func TestTooMuchWork(t *testing.T) {
	t.Parallel()
	// Merge keys that each merge the one before ten times.
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n  - key: a\n    rate_limit: &m0 {unit: second}\n")
	for i := 1; i < 8; i++ {
		fmt.Fprintf(&b, "  - key: k%d\n    rate_limit: &m%d {<<: [*m%d, *m%d, *m%d, *m%d, *m%d, *m%d, *m%d, *m%d, *m%d, *m%d]}\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	_, err := Parse(Options{}, File{Name: "a.yaml", Data: []byte(b.String())})
	for _, p := range problems(err) {
		if strings.Contains(p, "too large: more than 4194304 YAML nodes") {
			return
		}
	}
	t.Errorf("Parse of merge keys ten to the seventh times over: %q", problems(err))
}
