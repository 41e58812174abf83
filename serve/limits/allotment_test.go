package limits

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/algorithms"
)

func TestLease(t *testing.T) {
	t.Parallel()
	s, err := Parse(Options{Lease: 10}, File{Name: "l.yaml", Data: []byte(dedent(`
		domain: d
		descriptors:
		  - key: own
		    rate_limit: {unit: second, requests_per_unit: 100, lease: 20}
		  - key: big
		    rate_limit: {unit: minute, requests_per_unit: 1000}
		  - key: small
		    rate_limit: {unit: minute, requests_per_unit: 999}
		  - key: out
		    rate_limit: {unit: minute, requests_per_unit: 100000, lease: 0}
		  - key: bucket
		    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token-bucket, burst: 50, lease: 50}
		  - key: window
		    rate_limit: {unit: second, requests_per_unit: 100000, algorithm: sliding-window-counter}
	`))})
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	for key, want := range map[string]int64{"own": 20, "big": 10, "small": 0, "out": 0, "bucket": 50, "window": 0} {
		r := s.Match("d", e(key, "v")).Rule
		if r.Lease != want || LeaseOf(r.Algorithm) != want {
			t.Errorf("%s: Lease %d, LeaseOf %d; want %d", key, r.Lease, LeaseOf(r.Algorithm), want)
		}
	}
	if r := s.Match("d", e("own", "v")).Rule; r.Algorithm.Name() != algorithms.FixedWindow.Name() {
		t.Errorf("a leased rule's algorithm is named %q, want %q (its state is the same leased or not)", r.Algorithm.Name(), algorithms.FixedWindow.Name())
	}
	if s.Leases() != 3 {
		t.Errorf("Leases() = %d, want 3", s.Leases())
	}
	for _, tt := range []struct{ rl, want string }{
		{"{unlimited: true, lease: 5}", "lease is given for a rule that keeps no state"},
		{"{unit: second, requests_per_unit: 0, lease: 5}", "lease is given for a rule that keeps no state"},
		{"{unit: second, requests_per_unit: 10, algorithm: sliding-window-log, lease: 5}", "lease applies to the fixed-window, token-bucket and gcra algorithms, not sliding-window-log"},
		{"{unit: second, requests_per_unit: 10, lease: 11}", "lease 11 is more than the limit's capacity, 10"},
		{"{unit: second, requests_per_unit: 10, lease: -1}", "lease -1 is out of range"},
	} {
		_, err := Parse(Options{}, File{Name: "l.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: " + tt.rl + "\n")})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("rate_limit %s: %v, want %q", tt.rl, err, tt.want)
		}
	}
}
