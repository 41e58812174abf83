package limits

import (
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// shop exercises matching: values, defaults, wildcards, nesting, flags.
const shop = `
	domain: shop
	descriptors:
	  - key: tenant
	    value: acme
	    descriptors:
	      - key: route
	        rate_limit: {unit: second, requests_per_unit: 5}
	      - key: route
	        value: checkout
	        rate_limit: {unit: second, requests_per_unit: 10}
	  - key: client
	    rate_limit: {unit: minute, requests_per_unit: 20}
	  - key: client
	    value: partner
	    rate_limit: {unit: minute, requests_per_unit: 30, name: partner}
	  - key: client
	    value: internal
	  - key: region
	    value: eu
	    rate_limit: {unit: day, requests_per_unit: 15}
	    descriptors:
	      - key: plan
	        value: free
	        rate_limit: {unit: Day, requests_per_unit: 25, replaces: [{name: partner}, {name: other}]}
	  - key: bot
	    rate_limit: {unlimited: true}
	  - key: ip
	    detailed_metric: true
	    rate_limit: {unit: minute, requests_per_unit: 70}
	  - key: img
	    value: thumb*
	    rate_limit: {unit: hour, requests_per_unit: 1}
	  - key: img
	    value: thumbnail
	    rate_limit: {unit: hour, requests_per_unit: 2}
	  - key: img
	    value: th*
	    rate_limit: {unit: hour, requests_per_unit: 3}
	  - key: doc
	    value: pdf*
	    share_threshold: true
	    rate_limit: {unit: week, requests_per_unit: 4}
	  - key: all
	    value: "*"
	    rate_limit: {unit: month, requests_per_unit: 5}
	  - key: deny
	    rate_limit: {unit: hour, requests_per_unit: 0}
	  - key: unset
	    shadow_mode: true
	    rate_limit: {unit: year}
	  - key: a_b
	    value: c
	    rate_limit: {unit: second, requests_per_unit: 6}
	  - key: trailing_
	    rate_limit: {unit: second, requests_per_unit: 7}
`

// vtm exercises value_to_metric, as the service's tests do.
const vtm = `
	domain: vtm
	descriptors:
	  - key: route
	    value_to_metric: true
	    descriptors:
	      - key: method
	        value_to_metric: true
	        descriptors:
	          - key: subject
	            rate_limit: {unit: minute, requests_per_unit: 60}
	  - key: k1
	    descriptors:
	      - key: k2
	        value_to_metric: true
	        descriptors:
	          - key: k3
	            rate_limit: {unit: second, requests_per_unit: 1}
	  - key: svc
	    value_to_metric: true
	    descriptors:
	      - key: op
	        value: GET
	        value_to_metric: true
	        descriptors:
	          - key: id
	            rate_limit: {unit: minute, requests_per_unit: 60}
	      - key: op
	        value: read*
	        value_to_metric: true
	        descriptors:
	          - key: id
	            rate_limit: {unit: minute, requests_per_unit: 30}
	  - key: detail
	    value_to_metric: true
	    descriptors:
	      - key: who
	        detailed_metric: true
	        rate_limit: {unit: minute, requests_per_unit: 60}
	  - key: w
	    value: foo*
	    descriptors:
	      - key: other
	        value_to_metric: true
	        descriptors:
	          - key: last
	            rate_limit: {unit: minute, requests_per_unit: 20}
	  - key: wv
	    value: foo*
	    value_to_metric: true
	    rate_limit: {unit: minute, requests_per_unit: 20}
	  - key: outer
	    detailed_metric: true
	    rate_limit: {unit: minute, requests_per_unit: 100}
	    descriptors:
	      - key: inner
	        rate_limit: {unit: minute, requests_per_unit: 5}
`

// st exercises share_threshold, as the service's tests do.
const st = `
	domain: st
	descriptors:
	  - key: parent
	    value: p
	    descriptors:
	      - key: files
	        value: nested/*
	        share_threshold: true
	        rate_limit: {unit: minute, requests_per_unit: 200}
	  - key: files
	    value: top/*
	    share_threshold: true
	    descriptors:
	      - key: files
	        value: nested/*
	        share_threshold: true
	        rate_limit: {unit: minute, requests_per_unit: 300}
	  - key: route
	    value: api/*
	    share_threshold: true
	    value_to_metric: true
	    descriptors:
	      - key: method
	        rate_limit: {unit: minute, requests_per_unit: 60}
	  - key: service
	    value: svc/*
	    share_threshold: true
	    descriptors:
	      - key: endpoint
	        detailed_metric: true
	        rate_limit: {unit: minute, requests_per_unit: 80}
	  - key: path
	    value: path/*
	    share_threshold: true
	    descriptors:
	      - key: file
	        value: file/*
	        share_threshold: false
	        descriptors:
	          - key: type
	            rate_limit: {unit: minute, requests_per_unit: 120}
	  - key: f
	    value: test1
	    rate_limit: {unit: minute, requests_per_unit: 50}
	  - key: f
	    value: test*
	    share_threshold: true
	    rate_limit: {unit: minute, requests_per_unit: 100}
	  - key: bare*
	    share_threshold: true
	    rate_limit: {unit: minute, requests_per_unit: 9}
`

func TestMatch(t *testing.T) {
	t.Parallel()
	s := mustParse(t, Options{}, shop, vtm, st)
	tests := []struct {
		name    string
		domain  string
		entries []Entry
		path    string // the rule's Path; "" for no rule
		metric  string
		key     string // "" to skip
	}{
		{"nested default", "shop", e("tenant", "acme", "route", "x"), "shop.tenant_acme.route", "shop.tenant_acme.route", "shop|tenant=acme|route=x"},
		{"nested value", "shop", e("tenant", "acme", "route", "checkout"), "shop.tenant_acme.route_checkout", "shop.tenant_acme.route_checkout", ""},
		{"inner node without rule", "shop", e("tenant", "acme"), "", "", ""},
		{"unknown value, no default", "shop", e("tenant", "other", "route", "x"), "", "", ""},
		{"default key", "shop", e("client", "bob"), "shop.client", "shop.client", "shop|client=bob"},
		{"value over default", "shop", e("client", "partner"), "shop.client_partner", "shop.client_partner", ""},
		{"value without rule exempts", "shop", e("client", "internal"), "", "", ""},
		{"fewer entries than the tree", "shop", e("region", "eu"), "shop.region_eu", "shop.region_eu", ""},
		{"full depth", "shop", e("region", "eu", "plan", "free"), "shop.region_eu.plan_free", "shop.region_eu.plan_free", ""},
		{"full depth, no match", "shop", e("region", "eu", "plan", "paid"), "", "", ""},
		{"more entries than a leaf", "shop", e("client", "bob", "extra", "1"), "", "", ""},
		{"more entries than the tree", "shop", e("region", "eu", "plan", "free", "x", "y"), "", "", ""},
		{"a leading entry that matches nothing", "shop", e("nope", "1", "client", "bob"), "", "", ""},
		{"unlimited", "shop", e("bot", "x"), "shop.bot", "shop.bot", "shop|bot=x"},
		{"detailed", "shop", e("ip", "1.2.3.4"), "shop.ip", "shop.ip_1.2.3.4", "shop|ip=1.2.3.4"},
		{"detailed, empty value", "shop", e("ip", ""), "shop.ip", "shop.ip_", "shop|ip="},
		{"wildcard", "shop", e("img", "thumb1"), "shop.img_thumb*", "shop.img_thumb*", "shop|img=thumb1"},
		{"wildcard, empty rest", "shop", e("img", "thumb"), "shop.img_thumb*", "shop.img_thumb*", ""},
		{"value over wildcard", "shop", e("img", "thumbnail"), "shop.img_thumbnail", "shop.img_thumbnail", ""},
		{"first wildcard declared wins", "shop", e("img", "thumbs"), "shop.img_thumb*", "shop.img_thumb*", ""},
		{"second wildcard", "shop", e("img", "thx"), "shop.img_th*", "shop.img_th*", ""},
		{"no wildcard matches", "shop", e("img", "t"), "", "", ""},
		{"share_threshold", "shop", e("doc", "pdf-a"), "shop.doc_pdf*", "shop.doc_pdf*", "shop|doc=pdf*"},
		{"share_threshold, another value", "shop", e("doc", "pdf-b"), "shop.doc_pdf*", "shop.doc_pdf*", "shop|doc=pdf*"},
		{"star wildcard", "shop", e("all", "anything"), "shop.all_*", "shop.all_*", "shop|all=anything"},
		{"star wildcard, empty value", "shop", e("all", ""), "shop.all_*", "shop.all_*", "shop|all="},
		{"deny", "shop", e("deny", "x"), "shop.deny", "shop.deny", ""},
		{"composite keys collide as in the service", "shop", e("a", "b_c"), "shop.a_b_c", "shop.a_b_c", "shop|a=b_c"},
		{"empty value finds key_", "shop", e("trailing", ""), "shop.trailing_", "shop.trailing", ""},
		{"unknown domain", "nope", e("client", "bob"), "", "", ""},
		{"no entries", "shop", nil, "", "", ""},

		{"value_to_metric", "vtm", e("route", "draw", "method", "GET", "subject", "123"), "vtm.route.method.subject", "vtm.route_draw.method_GET.subject", ""},
		{"value_to_metric, empty value", "vtm", e("route", "", "method", "GET", "subject", "1"), "vtm.route.method.subject", "vtm.route.method_GET.subject", ""},
		{"value_to_metric mid-level", "vtm", e("k1", "X", "k2", "Y", "k3", "Z"), "vtm.k1.k2.k3", "vtm.k1.k2_Y.k3", ""},
		{"value_to_metric, configured value", "vtm", e("svc", "api", "op", "GET", "id", "u"), "vtm.svc.op_GET.id", "vtm.svc_api.op_GET.id", ""},
		{"value_to_metric, wildcard", "vtm", e("svc", "api", "op", "readfile", "id", "u"), "vtm.svc.op_read*.id", "vtm.svc_api.op_readfile.id", ""},
		{"detailed over value_to_metric", "vtm", e("detail", "a", "who", "b"), "vtm.detail.who", "vtm.detail_a.who_b", ""},
		{"wildcard kept beside value_to_metric", "vtm", e("w", "foo1", "other", "bar", "last", "X"), "vtm.w_foo*.other.last", "vtm.w_foo*.other_bar.last", ""},
		{"value_to_metric on the wildcard", "vtm", e("wv", "foo1"), "vtm.wv_foo*", "vtm.wv_foo1", ""},
		{"detailed on an inner node", "vtm", e("outer", "v"), "vtm.outer", "vtm.outer_v", ""},
		{"not detailed below", "vtm", e("outer", "v", "inner", "w"), "vtm.outer.inner", "vtm.outer.inner", ""},

		{"nested share_threshold", "st", e("parent", "p", "files", "nested/a"), "st.parent_p.files_nested/*", "st.parent_p.files_nested/*", "st|parent=p|files=nested/*"},
		{"two share_thresholds", "st", e("files", "top/a", "files", "nested/b"), "st.files_top/*.files_nested/*", "st.files_top/*.files_nested/*", "st|files=top/*|files=nested/*"},
		{"share_threshold over value_to_metric", "st", e("route", "api/v1", "method", "GET"), "st.route_api/*.method", "st.route_api/*.method", "st|route=api/*|method=GET"},
		{"share_threshold with detailed", "st", e("service", "svc/user", "endpoint", "get"), "st.service_svc/*.endpoint", "st.service_svc/*.endpoint_get", "st|service=svc/*|endpoint=get"},
		{"share_threshold with detailed, empty value", "st", e("service", "svc/user", "endpoint", ""), "st.service_svc/*.endpoint", "st.service_svc/*.endpoint", ""},
		{"share_threshold above a plain wildcard", "st", e("path", "path/foo", "file", "file/doc", "type", "pdf"), "st.path_path/*.file_file/*.type", "st.path_path/*.file_file/*.type", "st|path=path/*|file=file/doc|type=pdf"},
		{"value over share_threshold", "st", e("f", "test1"), "st.f_test1", "st.f_test1", "st|f=test1"},
		{"share_threshold beside a value", "st", e("f", "test23"), "st.f_test*", "st.f_test*", "st|f=test*"},
		{"share_threshold on a wildcard key", "st", e("barely", "x"), "st.bare*", "st.barely_bare*", "st|barely=bare*"},
	}
	for _, tt := range tests {
		m := s.Match(tt.domain, tt.entries)
		var path string
		if m.Rule != nil {
			path = m.Rule.Path
		}
		if path != tt.path {
			t.Errorf("%s: Match(%q, %v).Rule.Path = %q, want %q", tt.name, tt.domain, tt.entries, path, tt.path)
			continue
		}
		if m.Metric != tt.metric {
			t.Errorf("%s: Match(%q, %v).Metric = %q, want %q", tt.name, tt.domain, tt.entries, m.Metric, tt.metric)
		}
		if m.Rule == nil && m.Key != "" || m.Rule != nil && m.Key == "" {
			t.Errorf("%s: Match(%q, %v).Key = %q with rule %v", tt.name, tt.domain, tt.entries, m.Key, m.Rule)
		}
		if tt.key != "" && m.Key != tt.key {
			t.Errorf("%s: Match(%q, %v).Key = %q, want %q", tt.name, tt.domain, tt.entries, m.Key, tt.key)
		}
	}
}

func TestRules(t *testing.T) {
	t.Parallel()
	s := mustParse(t, Options{}, shop)
	if got, want := s.Len(), 17; got != want {
		t.Errorf("Len() = %d, want %d", got, want)
	}
	if got := s.Domains(); len(got) != 1 || got[0] != "shop" {
		t.Errorf("Domains() = %v, want [shop]", got)
	}
	rule := func(kv ...string) *Rule {
		t.Helper()
		m := s.Match("shop", e(kv...))
		if m.Rule == nil {
			t.Fatalf("Match(shop, %v) found no rule", kv)
		}
		return m.Rule
	}

	r := rule("client", "partner")
	if r.Unit != rlsv3.RateLimitResponse_RateLimit_MINUTE || r.RequestsPerUnit != 30 || r.Name != "partner" ||
		r.Limit.Rate() != 30 || r.Limit.Period().Minutes() != 1 || r.Algorithm.Name() != "fixed-window" ||
		r.File != "a.yaml" || r.Line != 13 || r.Unlimited || r.Deny || r.Shadow {
		t.Errorf("client_partner: %+v", r)
	}
	r = rule("region", "eu", "plan", "free")
	if r.Unit != rlsv3.RateLimitResponse_RateLimit_DAY || len(r.Replaces) != 2 || r.Replaces[0] != "partner" || r.Replaces[1] != "other" {
		t.Errorf("plan_free: unit %v, replaces %q", r.Unit, r.Replaces)
	}
	r = rule("bot", "x")
	if !r.Unlimited || !r.Limit.IsInf() || r.Unit != rlsv3.RateLimitResponse_RateLimit_UNKNOWN || r.Algorithm == nil {
		t.Errorf("bot: %+v", r)
	}
	r = rule("deny", "x")
	if !r.Deny || r.Limit.Validate() == nil || r.Unit != rlsv3.RateLimitResponse_RateLimit_HOUR || r.RequestsPerUnit != 0 {
		t.Errorf("deny: %+v", r)
	}
	r = rule("unset", "x") // a unit without requests_per_unit is 0 to the service
	if !r.Deny || !r.Shadow || r.Unit != rlsv3.RateLimitResponse_RateLimit_YEAR {
		t.Errorf("unset: %+v", r)
	}
	r = rule("doc", "pdf1")
	if !r.ShareThreshold || r.Unit != rlsv3.RateLimitResponse_RateLimit_WEEK || r.Limit.Period().Hours() != 7*24 {
		t.Errorf("doc: %+v", r)
	}
	r = rule("all", "x")
	if r.Unit != rlsv3.RateLimitResponse_RateLimit_MONTH || r.Limit.Period().Hours() != 30*24 {
		t.Errorf("all: %+v", r)
	}
	r = rule("ip", "x")
	if !r.DetailedMetric {
		t.Errorf("ip: %+v", r)
	}
}

// TestMatchAllocs checks that Match allocates only the strings it
// returns, and nothing when no rule applies.
func TestMatchAllocs(t *testing.T) {
	s := mustParse(t, Options{}, shop, st)
	for _, tt := range []struct {
		domain  string
		entries []Entry
		want    float64
	}{
		{"shop", e("tenant", "acme", "route", "checkout"), 2},
		{"shop", e("img", "thumb1"), 2},
		{"st", e("files", "top/a", "files", "nested/b"), 2},
		{"shop", e("client", "internal"), 0},
		{"shop", e("nope", "x"), 0},
		{"nope", e("client", "bob"), 0},
	} {
		if got := testing.AllocsPerRun(100, func() { s.Match(tt.domain, tt.entries) }); got > tt.want {
			t.Errorf("Match(%q, %v) allocates %v times, want at most %v", tt.domain, tt.entries, got, tt.want)
		}
	}
}

func TestMatchConcurrentSafe(t *testing.T) {
	t.Parallel()
	s := mustParse(t, Options{}, shop, st)
	want := s.Match("st", e("files", "top/a", "files", "nested/b"))
	done := make(chan bool)
	for range 8 {
		go func() {
			ok := true
			for range 1000 {
				m := s.Match("st", e("files", "top/a", "files", "nested/b"))
				ok = ok && m == want
				s.Match("shop", e("tenant", "acme", "route", "x"))
			}
			done <- ok
		}()
	}
	for range 8 {
		if !<-done {
			t.Error("Match returned different results from different goroutines")
		}
	}
}

func BenchmarkMatch(b *testing.B) {
	s := mustParse(b, Options{}, shop, vtm, st)
	for _, bm := range []struct {
		name    string
		domain  string
		entries []Entry
	}{
		{"value", "shop", e("client", "partner")},
		{"nested", "shop", e("tenant", "acme", "route", "checkout")},
		{"wildcard", "shop", e("img", "thumb1")},
		{"share_threshold", "st", e("files", "top/a", "files", "nested/b")},
		{"none", "shop", e("nope", "x")},
	} {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s.Match(bm.domain, bm.entries)
			}
		})
	}
}
