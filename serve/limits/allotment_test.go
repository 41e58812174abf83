package limits

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/algorithms"
)

func TestAllotment(t *testing.T) {
	t.Parallel()
	s, err := Parse(Options{Allotment: 10}, File{Name: "l.yaml", Data: []byte(dedent(`
		domain: d
		descriptors:
		  - key: own
		    rate_limit: {unit: second, requests_per_unit: 100, allotment: 20}
		  - key: big
		    rate_limit: {unit: minute, requests_per_unit: 1000}
		  - key: small
		    rate_limit: {unit: minute, requests_per_unit: 999}
		  - key: out
		    rate_limit: {unit: minute, requests_per_unit: 100000, allotment: 0}
		  - key: bucket
		    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token-bucket, burst: 50, allotment: 50}
		  - key: window
		    rate_limit: {unit: second, requests_per_unit: 100000, algorithm: sliding-window-counter}
	`))})
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	for key, want := range map[string]int64{"own": 20, "big": 10, "small": 0, "out": 0, "bucket": 50, "window": 0} {
		r := s.Match("d", e(key, "v")).Rule
		if r.Allotment != want || AllotmentOf(r.Algorithm) != want {
			t.Errorf("%s: Allotment %d, AllotmentOf %d; want %d", key, r.Allotment, AllotmentOf(r.Algorithm), want)
		}
	}
	if r := s.Match("d", e("own", "v")).Rule; r.Algorithm.Name() != algorithms.FixedWindow.Name() {
		t.Errorf("an allotted rule's algorithm is named %q, want %q (its state is the same allotted or not)", r.Algorithm.Name(), algorithms.FixedWindow.Name())
	}
	if s.Allotted() != 3 {
		t.Errorf("Allotted() = %d, want 3", s.Allotted())
	}
	for _, tt := range []struct{ rl, want string }{
		{"{unlimited: true, allotment: 5}", "allotment is given for a rule that keeps no state"},
		{"{unit: second, requests_per_unit: 0, allotment: 5}", "allotment is given for a rule that keeps no state"},
		{"{unit: second, requests_per_unit: 10, algorithm: sliding-window-log, allotment: 5}", "allotment applies to the fixed-window, token-bucket and gcra algorithms, not sliding-window-log"},
		{"{unit: second, requests_per_unit: 10, allotment: 11}", "allotment 11 is more than the limit's capacity, 10"},
		{"{unit: second, requests_per_unit: 10, allotment: -1}", "allotment -1 is out of range"},
		{"{unit: second, requests_per_unit: 100, lease: 5}", `key "lease" is now named "allotment"`},
	} {
		_, err := Parse(Options{}, File{Name: "l.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: " + tt.rl + "\n")})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("rate_limit %s: %v, want %q", tt.rl, err, tt.want)
		}
	}
}
