package limits

import (
	"slices"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// A key given twice in one mapping loads, the last winning, as the rate
// limit service (yaml.v2) reads it, with a warning naming file and line.
func TestRepeatedKeys(t *testing.T) {
	t.Parallel()
	s, err := Parse(Options{}, File{Name: "a.yaml", Data: []byte(dedent(`
		domain: d
		domain: e
		descriptors:
		  - key: k
		    rate_limit:
		      unit: second
		      requests_per_unit: 1
		      requests_per_unit: 2
		      unit: minute
	`))})
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if got, want := s.Domains(), []string{"e"}; !slices.Equal(got, want) {
		t.Errorf("Domains() = %q, want %q", got, want)
	}
	r := s.Match("e", e("k", "v")).Rule
	if r == nil || r.RequestsPerUnit != 2 || r.Unit != rlsv3.RateLimitResponse_RateLimit_MINUTE {
		t.Fatalf("Match(e, k=v).Rule = %+v, want 2 a minute", r)
	}
	var got []string
	for _, w := range s.Warnings() {
		got = append(got, w.String())
	}
	want := []string{
		`a.yaml:2: key "domain" repeats the one at line 1; the last wins, as the rate limit service reads it`,
		`a.yaml:8: descriptor "k": key "requests_per_unit" repeats the one at line 7; the last wins, as the rate limit service reads it`,
		`a.yaml:9: descriptor "k": key "unit" repeats the one at line 6; the last wins, as the rate limit service reads it`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("Warnings() =\n%q\nwant\n%q", got, want)
	}
}
