package serve

import (
	"io"
	"net/http"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// Token buckets that refill one every six minutes or more: nothing
// refills, and no window ends, during the test.
const statsConfig = `
domain: api
descriptors:
  - key: user
    rate_limit: {limit: 10/hour, algorithm: token-bucket}
  - key: tenant
    detailed_metric: true
    rate_limit: {limit: 5/hour, algorithm: token-bucket}
  - key: experiment
    shadow_mode: true
    rate_limit: {limit: 1/hour, algorithm: token-bucket}
  - key: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
`

// TestDescriptorStats checks each descriptor's counts, named as
// envoyproxy/ratelimit names its stats, against a sequence whose counts
// are worked out by hand, and their Prometheus series.
func TestDescriptorStats(t *testing.T) {
	t.Parallel()
	h := start(t, statsConfig, nil)
	ask := func(n int, want string, req *rlsv3.RateLimitRequest) {
		t.Helper()
		for range n {
			if got := outcome(h.ask(t, req)); !strings.HasPrefix(got, want) {
				t.Fatalf("%v: %s, want %s…", req, got, want)
			}
		}
	}
	// user: 9 admitted, the 9th past 80% of 10 (near); 2 hits denied;
	// 1 more admitted (near); then 1 admitted but not charged, in a
	// request the tenant denied.
	ask(9, "OK", request("api", desc("user=alice")))
	ask(1, "OVER_LIMIT", request("api", withHits(desc("user=alice"), 2)))
	ask(1, "OK|OK:0", request("api", desc("user=alice")))
	// tenant (detailed): 5 admitted, the 5th near (past 4); 1 denied;
	// then 1 denied beside the user.
	ask(5, "OK", request("api", desc("tenant=acme")))
	ask(1, "OVER_LIMIT", request("api", desc("tenant=acme")))
	ask(1, "OVER_LIMIT|OK:10,OVER_LIMIT:0", request("api", desc("user=bob"), desc("tenant=acme")))
	// experiment (shadow): 1 admitted (near: past 0), 2 denied, answered OK.
	ask(3, "OK", request("api", desc("experiment=x")))
	// blocked: requests_per_unit 0 denies every hit.
	ask(2, "OVER_LIMIT", request("api", withHits(desc("blocked"), 3)))
	// A value with a quote and a backslash, escaped in its label.
	ask(1, "OK", request("api", desc(`tenant=a"b\c`)))
	// An override (1 an hour) is named by its entries' keys and values:
	// one admitted, one denied.
	o := desc("user=jo", "path")
	o.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR}
	ask(1, "OK", request("api", o))
	ask(1, "OVER_LIMIT", request("api", o))

	want := map[string]DescriptorStats{
		"api.user":         {TotalHits: 12 + 1, WithinLimit: 10 + 1, NearLimit: 2, OverLimit: 2},
		"api.tenant_acme":  {TotalHits: 7, WithinLimit: 5, NearLimit: 1, OverLimit: 2},
		"api.experiment":   {TotalHits: 3, WithinLimit: 1, NearLimit: 1, OverLimit: 2, ShadowMode: 2},
		"api.blocked":      {TotalHits: 6, OverLimit: 6},
		`api.tenant_a"b\c`: {TotalHits: 1, WithinLimit: 1},
		"api.user_jo.path": {TotalHits: 2, WithinLimit: 1, NearLimit: 1, OverLimit: 1},
	}
	svc := h.srv.Service()
	for name, w := range want {
		if got, ok := svc.DescriptorStats(name); !ok || got != w {
			t.Errorf("DescriptorStats(%q) = %+v, %v; want %+v", name, got, ok, w)
		}
	}
	if got, ok := svc.DescriptorStats("api.tenant"); ok {
		t.Errorf("a detailed_metric rule counted under its key alone: %+v", got)
	}

	resp, err := http.Get("http://" + h.srv.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		`sluice_rls_descriptor_total_hits_total{descriptor="api.user"} 13`,
		`sluice_rls_descriptor_near_limit_total{descriptor="api.tenant_acme"} 1`,
		`sluice_rls_descriptor_shadow_mode_total{descriptor="api.experiment"} 2`,
		`sluice_rls_descriptor_over_limit_total{descriptor="api.blocked"} 6`,
		`sluice_rls_descriptor_within_limit_total{descriptor="api.tenant_a\"b\\c"} 1`,
		`sluice_rls_descriptor_over_limit_with_local_cache_total{descriptor="api.user"} 0`,
	} {
		if !strings.Contains(string(body), "\n"+line+"\n") {
			t.Errorf("/metrics lacks %s", line)
		}
	}
}

// TestDescriptorStatsBounded: beyond WithDescriptorStats's bound, the
// counts of new names go together under OtherDescriptors; 0 counts none.
func TestDescriptorStatsBounded(t *testing.T) {
	t.Parallel()
	h := start(t, statsConfig, nil, func(c *Config) { c.Service = append(c.Service, WithDescriptorStats(2)) })
	for _, v := range []string{"a", "b", "c", "d", "a"} {
		h.ask(t, request("api", desc("tenant="+v)))
	}
	svc := h.srv.Service()
	for name, hits := range map[string]uint64{"api.tenant_a": 2, "api.tenant_b": 1, OtherDescriptors: 2} {
		if got, _ := svc.DescriptorStats(name); got.TotalHits != hits {
			t.Errorf("DescriptorStats(%q).TotalHits = %d, want %d", name, got.TotalHits, hits)
		}
	}
	if _, ok := svc.DescriptorStats("api.tenant_c"); ok {
		t.Error("a name beyond the bound has counts of its own")
	}

	off := start(t, statsConfig, nil, func(c *Config) { c.Service = append(c.Service, WithDescriptorStats(0)) })
	off.ask(t, request("api", desc("user=a")))
	if got, ok := off.srv.Service().DescriptorStats("api.user"); ok {
		t.Errorf("WithDescriptorStats(0) counted %+v", got)
	}
	for _, n := range []int{-1, 1_000_001} {
		if _, err := NewService(off.srv.Service().store, off.srv.Service().Limits(), WithDescriptorStats(n)); err == nil {
			t.Errorf("WithDescriptorStats(%d): no error", n)
		}
	}
}
