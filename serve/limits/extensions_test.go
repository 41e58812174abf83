package limits

import (
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
)

func TestExtensions(t *testing.T) {
	t.Parallel()
	s := mustParse(t, Options{}, `
		domain: x
		descriptors:
		  - key: tb
		    rate_limit: {unit: second, requests_per_unit: 10, burst: 50, algorithm: token-bucket}
		  - key: gcra
		    rate_limit: {limit: 10/s burst 50, algorithm: gcra}
		  - key: gcra2
		    rate_limit: {limit: 100/min, burst: 5, algorithm: gcra}
		  - key: swc
		    rate_limit: {limit: 1/250ms, algorithm: sliding-window-counter}
		  - key: swl
		    rate_limit: {unit: hour, requests_per_unit: 3, algorithm: sliding-window-log}
		  - key: fw
		    rate_limit: {limit: 3/7s}
		  - key: inf
		    rate_limit: {limit: unlimited}
		  - key: fwburst
		    rate_limit: {limit: 10/s burst 10}
	`)
	tests := []struct {
		key       string
		alg       core.Algorithm
		limit     core.Limit
		unit      rlsv3.RateLimitResponse_RateLimit_Unit
		perUnit   uint32
		unlimited bool
	}{
		{"tb", algorithms.TokenBucket, core.PerSecond(10).WithBurst(50), rlsv3.RateLimitResponse_RateLimit_SECOND, 10, false},
		{"gcra", algorithms.GCRA, core.PerSecond(10).WithBurst(50), rlsv3.RateLimitResponse_RateLimit_SECOND, 10, false},
		{"gcra2", algorithms.GCRA, core.PerMinute(100).WithBurst(5), rlsv3.RateLimitResponse_RateLimit_MINUTE, 100, false},
		{"swc", algorithms.SlidingWindowCounter, core.Every(250 * time.Millisecond), rlsv3.RateLimitResponse_RateLimit_SECOND, 4, false},
		{"swl", algorithms.SlidingWindowLog, core.PerHour(3), rlsv3.RateLimitResponse_RateLimit_HOUR, 3, false},
		{"fw", algorithms.FixedWindow, core.Per(3, 7*time.Second), rlsv3.RateLimitResponse_RateLimit_WEEK, 259200, false},
		{"inf", algorithms.FixedWindow, core.Inf, rlsv3.RateLimitResponse_RateLimit_UNKNOWN, 0, true},
		{"fwburst", algorithms.FixedWindow, core.PerSecond(10), rlsv3.RateLimitResponse_RateLimit_SECOND, 10, false},
	}
	for _, tt := range tests {
		m := s.Match("x", e(tt.key, "v"))
		if m.Rule == nil {
			t.Errorf("Match(x, %s) found no rule", tt.key)
			continue
		}
		r := m.Rule
		if r.Algorithm != tt.alg || r.Limit != tt.limit || r.Unit != tt.unit || r.RequestsPerUnit != tt.perUnit || r.Unlimited != tt.unlimited {
			t.Errorf("%s: rule %v %v %v %d unlimited %v, want %v %v %v %d unlimited %v", tt.key,
				r.Algorithm.Name(), r.Limit, r.Unit, r.RequestsPerUnit, r.Unlimited,
				tt.alg.Name(), tt.limit, tt.unit, tt.perUnit, tt.unlimited)
		}
	}
}

func TestUnitOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		limit   core.Limit
		unit    rlsv3.RateLimitResponse_RateLimit_Unit
		perUnit uint32
	}{
		{core.PerSecond(10), rlsv3.RateLimitResponse_RateLimit_SECOND, 10},
		{core.PerMinute(100), rlsv3.RateLimitResponse_RateLimit_MINUTE, 100},
		{core.PerHour(7), rlsv3.RateLimitResponse_RateLimit_HOUR, 7},
		{core.PerDay(1000), rlsv3.RateLimitResponse_RateLimit_DAY, 1000},
		{core.Per(5, 7*24*time.Hour), rlsv3.RateLimitResponse_RateLimit_WEEK, 5},
		{core.Per(1, 30*24*time.Hour), rlsv3.RateLimitResponse_RateLimit_MONTH, 1},
		{core.Per(7, 365*24*time.Hour), rlsv3.RateLimitResponse_RateLimit_YEAR, 7},
		{core.Every(250 * time.Millisecond), rlsv3.RateLimitResponse_RateLimit_SECOND, 4},
		{core.Per(60, 2*time.Minute), rlsv3.RateLimitResponse_RateLimit_MINUTE, 30},
		{core.Every(90 * time.Second), rlsv3.RateLimitResponse_RateLimit_HOUR, 40},
		{core.Per(3, 7*time.Second), rlsv3.RateLimitResponse_RateLimit_WEEK, 259200},
		{core.Every(13 * time.Second), rlsv3.RateLimitResponse_RateLimit_UNKNOWN, 0},
		{core.PerSecond(1 << 32), rlsv3.RateLimitResponse_RateLimit_UNKNOWN, 0},
		{core.PerSecond(1<<32 - 1), rlsv3.RateLimitResponse_RateLimit_SECOND, 1<<32 - 1},
		{core.Per(1<<40, 1000*time.Hour), rlsv3.RateLimitResponse_RateLimit_UNKNOWN, 0},
	}
	for _, tt := range tests {
		unit, perUnit := unitOf(tt.limit)
		if unit != tt.unit || perUnit != tt.perUnit {
			t.Errorf("unitOf(%v) = %v, %d, want %v, %d", tt.limit, unit, perUnit, tt.unit, tt.perUnit)
		}
	}
}

// TestPeerYAML checks that values mean what they meant to the rate limit
// service, which reads them with yaml.v2: YAML 1.1 booleans and integers,
// numbers and booleans as strings, null as absent, anchors, aliases and
// merge keys.
func TestPeerYAML(t *testing.T) {
	t.Parallel()
	s := mustParse(t, Options{}, `
		domain: 42
		descriptors:
		  - key: hex
		    rate_limit: {unit: SECOND, requests_per_unit: 0x10}
		  - key: under
		    rate_limit: {unit: sEcOnD, requests_per_unit: 1_000}
		  - key: octal
		    rate_limit: {unit: second, requests_per_unit: 010}
		  - key: num
		    value: 123
		    rate_limit: &std
		      unit: minute
		      requests_per_unit: 5
		  - key: bool
		    value: yes
		    shadow_mode: on
		    detailed_metric: Y
		    rate_limit: *std
		  - key: nil
		    value: ~
		    rate_limit: {unit: second, requests_per_unit: 1}
		    descriptors: ~
		  - key: nolimit
		    rate_limit: null
		  - key: merged
		    rate_limit:
		      <<: *std
		      requests_per_unit: 6
		  - key: date
		    value: 2024-01-02
		    rate_limit: {<<: [{unit: hour}, {unit: day, requests_per_unit: 8}]}
		  - key: quota
		    quota_mode: false
		    rate_limit: {unlimited: yes, requests_per_unit: 9}
		  - key: "0.5"
		    value: "1.5"
		    rate_limit: {unit: second, requests_per_unit: 1}
	`)
	if got := s.Domains(); len(got) != 1 || got[0] != "42" {
		t.Fatalf("Domains() = %q, want [42]", got)
	}
	tests := []struct {
		entries []Entry
		path    string
		perUnit uint32
		unit    rlsv3.RateLimitResponse_RateLimit_Unit
	}{
		{e("hex", "v"), "42.hex", 16, rlsv3.RateLimitResponse_RateLimit_SECOND},
		{e("under", "v"), "42.under", 1000, rlsv3.RateLimitResponse_RateLimit_SECOND},
		{e("octal", "v"), "42.octal", 8, rlsv3.RateLimitResponse_RateLimit_SECOND},
		{e("num", "123"), "42.num_123", 5, rlsv3.RateLimitResponse_RateLimit_MINUTE},
		{e("bool", "yes"), "42.bool_yes", 5, rlsv3.RateLimitResponse_RateLimit_MINUTE},
		{e("nil", "x"), "42.nil", 1, rlsv3.RateLimitResponse_RateLimit_SECOND},
		{e("nolimit", "x"), "", 0, 0},
		{e("merged", "x"), "42.merged", 6, rlsv3.RateLimitResponse_RateLimit_MINUTE},
		{e("date", "2024-01-02"), "42.date_2024-01-02", 8, rlsv3.RateLimitResponse_RateLimit_HOUR},
		{e("quota", "x"), "42.quota", 9, rlsv3.RateLimitResponse_RateLimit_UNKNOWN},
		{e("0.5", "1.5"), "42.0.5_1.5", 1, rlsv3.RateLimitResponse_RateLimit_SECOND},
	}
	for _, tt := range tests {
		m := s.Match("42", tt.entries)
		switch {
		case m.Rule == nil && tt.path == "":
		case m.Rule == nil:
			t.Errorf("Match(42, %v) found no rule, want %s", tt.entries, tt.path)
		case m.Rule.Path != tt.path || m.Rule.RequestsPerUnit != tt.perUnit || m.Rule.Unit != tt.unit:
			t.Errorf("Match(42, %v) = %s %d/%v, want %s %d/%v", tt.entries, m.Rule.Path, m.Rule.RequestsPerUnit, m.Rule.Unit, tt.path, tt.perUnit, tt.unit)
		}
	}
	if r := s.Match("42", e("bool", "yes")).Rule; r == nil || !r.Shadow || !r.DetailedMetric {
		t.Errorf("shadow_mode: on, detailed_metric: Y read as %+v", r)
	}
}

func TestMergeDomains(t *testing.T) {
	t.Parallel()
	a := `
		domain: d
		descriptors:
		  - key: w
		    value: a*
		    rate_limit: {unit: second, requests_per_unit: 1}
	`
	b := `
		domain: d
		descriptors:
		  - key: w
		    value: ab*
		    rate_limit: {unit: second, requests_per_unit: 2}
		  - key: k
		    rate_limit: {unit: second, requests_per_unit: 3}
	`
	s := mustParse(t, Options{MergeDomains: true}, a, b)
	if s.Len() != 3 {
		t.Errorf("Len() = %d, want 3", s.Len())
	}
	// The wildcards are tried in the order the files declared them.
	if m := s.Match("d", e("w", "abc")); m.Rule == nil || m.Rule.RequestsPerUnit != 1 || m.Rule.File != "a.yaml" {
		t.Errorf("Match(d, w=abc) = %+v, want a.yaml's rule", m.Rule)
	}
	if m := s.Match("d", e("k", "x")); m.Rule == nil || m.Rule.File != "b.yaml" || m.Rule.Line != 6 {
		t.Errorf("Match(d, k=x) = %+v, want b.yaml:6", m.Rule)
	}
	if _, err := Parse(Options{}, files(a, b)...); err == nil {
		t.Error("Parse without MergeDomains accepted a domain declared twice")
	}
}

func TestDigest(t *testing.T) {
	t.Parallel()
	a := mustParse(t, Options{}, "domain: d\n")
	b := mustParse(t, Options{}, "domain: d\n")
	c := mustParse(t, Options{}, "domain: d # changed\n")
	d := mustParse(t, Options{MergeDomains: true}, "domain: d\n")
	if a.Digest() != b.Digest() {
		t.Error("the digests of one configuration differ")
	}
	if a.Digest() == c.Digest() || a.Digest() == d.Digest() {
		t.Error("the digests of different configurations are equal")
	}
	var nilSet *Set
	if nilSet.Len() != 0 || nilSet.Domains() != nil || nilSet.Match("d", e("k", "v")).Rule != nil || nilSet.Digest() != [32]byte{} {
		t.Error("a nil *Set is not empty")
	}
}

func TestUnitPeriod(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		unit rlsv3.RateLimitResponse_RateLimit_Unit
		want time.Duration
	}{
		{rlsv3.RateLimitResponse_RateLimit_SECOND, time.Second},
		{rlsv3.RateLimitResponse_RateLimit_MINUTE, time.Minute},
		{rlsv3.RateLimitResponse_RateLimit_HOUR, time.Hour},
		{rlsv3.RateLimitResponse_RateLimit_DAY, 24 * time.Hour},
		{rlsv3.RateLimitResponse_RateLimit_WEEK, 7 * 24 * time.Hour},
		{rlsv3.RateLimitResponse_RateLimit_MONTH, 30 * 24 * time.Hour},
		{rlsv3.RateLimitResponse_RateLimit_YEAR, 365 * 24 * time.Hour},
		{rlsv3.RateLimitResponse_RateLimit_UNKNOWN, 0},
		{rlsv3.RateLimitResponse_RateLimit_Unit(99), 0},
	} {
		if got := UnitPeriod(tt.unit); got != tt.want {
			t.Errorf("UnitPeriod(%v) = %v, want %v", tt.unit, got, tt.want)
		}
	}
}
