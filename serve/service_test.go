package serve

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores/memstore"
)

// api is the configuration most tests serve: per-minute windows, so that
// a test rarely straddles a boundary (those that count exactly check).
const api = `
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3, name: per-user}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: path
    value: /login
    rate_limit: {unit: minute, requests_per_unit: 1, name: login}
  - key: path
    value: /health
    rate_limit: {unlimited: true}
  - key: plan
    value: free
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 2, name: free-user}
  - key: experiment
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: vip
    rate_limit:
      unit: minute
      requests_per_unit: 100
      replaces: [{name: per-user}]
  - key: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: bucket
    rate_limit: {limit: 2/min burst 4, algorithm: token-bucket}
`

// sameMinute runs f, and again if a minute boundary passed while it ran:
// the tests count against per-minute fixed windows. f returns what it
// found wrong, which fails the test only if no boundary passed.
func sameMinute(t *testing.T, f func() error) {
	t.Helper()
	for range 3 {
		before := time.Now().Truncate(time.Minute)
		err := f()
		if time.Now().Truncate(time.Minute).Equal(before) {
			if err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Log("a minute boundary passed; again")
	}
	t.Fatal("three minute boundaries in a row")
}

func TestDecisions(t *testing.T) {
	t.Parallel()
	type step struct {
		req  *rlsv3.RateLimitRequest
		want string
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"one descriptor to its limit", []step{
			{request("api", desc("user=alice")), "OK|OK:2"},
			{request("api", desc("user=alice")), "OK|OK:1"},
			{request("api", desc("user=alice")), "OK|OK:0"},
			{request("api", desc("user=alice")), "OVER_LIMIT|OVER_LIMIT:0"},
			{request("api", desc("user=bob")), "OK|OK:2"},
		}},
		{"a request over one limit charges none", []step{
			{request("api", desc("path=/login"), desc("tenant=acme")), "OK|OK:0,OK:4"},
			{request("api", desc("path=/login"), desc("tenant=acme")), "OVER_LIMIT|OVER_LIMIT:0,OK:4"},
			{request("api", desc("tenant=acme")), "OK|OK:3"},
		}},
		{"nested, unlimited, unmatched, unknown domain", []step{
			{request("api", desc("plan=free", "user=carol")), "OK|OK:1"},
			{request("api", desc("plan=free", "user=carol")), "OK|OK:0"},
			{request("api", desc("plan=free", "user=carol")), "OVER_LIMIT|OVER_LIMIT:0"},
			{request("api", desc("plan=paid", "user=carol")), "OK|OK"},
			{request("api", desc("path=/health")), "OK|OK:max"},
			{request("api", desc("color=red")), "OK|OK"},
			{request("elsewhere", desc("user=alice")), "OK|OK"},
		}},
		{"shadow mode answers OK and charges with the enforced", []step{
			{request("api", desc("experiment=x"), desc("tenant=shadowed")), "OK|OK:0,OK:4"},
			{request("api", desc("experiment=x"), desc("tenant=shadowed")), "OK|OK:0,OK:3"},
			{request("api", desc("tenant=shadowed")), "OK|OK:2"},
		}},
		{"replaces", []step{
			{request("api", desc("user=dave"), desc("vip=dave")), "OK|OK,OK:99"},
			{request("api", desc("user=dave"), desc("vip=dave")), "OK|OK,OK:98"},
			{request("api", desc("user=dave")), "OK|OK:2"},
		}},
		{"a limit of zero", []step{
			{request("api", desc("blocked=x"), desc("tenant=zero")), "OVER_LIMIT|OVER_LIMIT:0,OK:5"},
			{request("api", desc("tenant=zero")), "OK|OK:4"},
		}},
		{"hits above the limit are denied and not counted", []step{
			{request("api", withHits(desc("user=erin"), 4)), "OVER_LIMIT|OVER_LIMIT:3"},
			{request("api", withHits(desc("user=erin"), 3)), "OK|OK:0"},
			{&rlsv3.RateLimitRequest{Domain: "api", HitsAddend: 2, Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user=frank")}}, "OK|OK:1"},
		}},
		{"two descriptors on one key are charged together", []step{
			{request("api", desc("user=gina"), desc("user=gina")), "OK|OK:1,OK:1"},
			{request("api", desc("user=gina"), desc("user=gina")), "OVER_LIMIT|OVER_LIMIT:1,OVER_LIMIT:1"},
		}},
		{"a token bucket from the text form", []step{
			{request("api", withHits(desc("bucket=b"), 4)), "OK|OK:0"},
			{request("api", desc("bucket=b")), "OVER_LIMIT|OVER_LIMIT:0"},
		}},
		{"a refund gives back", []step{
			{request("api", withHits(desc("user=hal"), 3)), "OK|OK:0"},
			{request("api", &ratelimitv3.RateLimitDescriptor{Entries: desc("user=hal").Entries, HitsAddend: wrapperspb.UInt64(2), IsNegativeHits: true}), "OK|OK:2"},
			{request("api", desc("user=hal")), "OK|OK:1"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sameMinute(t, func() error {
				h := start(t, api, nil)
				defer h.stop()
				for i, s := range tt.steps {
					if got := outcome(h.ask(t, s.req)); got != s.want {
						return fmt.Errorf("step %d: %s, want %s", i, got, s.want)
					}
				}
				return nil
			})
		})
	}
}

func TestStatusFields(t *testing.T) {
	t.Parallel()
	h := start(t, api, nil)
	// The window's end, as the peer reports it: the server decided
	// between the test's two clock readings, in one minute (a stall of
	// the test widens the range, not the answer).
	sameMinute(t, func() error {
		before := time.Now()
		resp := h.ask(t, request("api", desc("user=ivy")))
		after := time.Now()
		st := resp.Statuses[0]
		if cl := st.CurrentLimit; cl == nil || cl.Name != "per-user" || cl.RequestsPerUnit != 3 || cl.Unit != rlsv3.RateLimitResponse_RateLimit_MINUTE {
			return fmt.Errorf("current_limit = %v, want per-user 3/MINUTE", cl)
		}
		end := before.Truncate(time.Minute).Add(time.Minute)
		least, most := end.Sub(after)-time.Second, end.Sub(before)+time.Second
		if d := st.DurationUntilReset.AsDuration(); d <= 0 || d > time.Minute || d < least || d > most {
			return fmt.Errorf("duration_until_reset = %v, want %v to %v", d, least, most)
		}
		return nil
	})
}

func TestOverride(t *testing.T) {
	t.Parallel()
	o := desc("user=jo")
	o.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR}
	var h *harness
	sameMinute(t, func() error {
		h = start(t, api, nil)
		got := []string{outcome(h.ask(t, request("api", o))), outcome(h.ask(t, request("api", o))), outcome(h.ask(t, request("api", desc("user=jo"))))}
		want := []string{"OK|OK:0", "OVER_LIMIT|OVER_LIMIT:0", "OK|OK:2"}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			return fmt.Errorf("override, override, configured = %v, want %v", got, want)
		}
		return nil
	})
	if cl := h.ask(t, request("api", o)).Statuses[0].CurrentLimit; cl.Unit != rlsv3.RateLimitResponse_RateLimit_HOUR || cl.RequestsPerUnit != 1 {
		t.Errorf("override's current_limit = %v", cl)
	}
	if got := outcome(h.ask(t, request("elsewhere", o))); got != "OK|OK" {
		t.Errorf("an override in an unknown domain: %s, want OK|OK (no limit, as envoyproxy/ratelimit)", got)
	}
	bad := desc("user=jo")
	bad.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}
	if _, err := h.client.ShouldRateLimit(context.Background(), request("api", bad)); status.Code(err) != codes.InvalidArgument {
		t.Errorf("an override without a unit: %v, want InvalidArgument", err)
	}
}

// TestBadInput sends what no Envoy should: each is answered by the
// documented policy, and no key the store sees is longer than the bound.
func TestBadInput(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	mem, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	rec.Store = mem
	h := start(t, api, rec)
	many := make([]*ratelimitv3.RateLimitDescriptor, 1000)
	for i := range many {
		many[i] = desc(fmt.Sprintf("user=u%d", i))
	}
	invalid := []struct {
		name string
		req  *rlsv3.RateLimitRequest
	}{
		{"no descriptors", request("api")},
		{"no domain", request("", desc("user=a"))},
		{"1,000 descriptors", request("api", many...)},
	}
	for _, tt := range invalid {
		if _, err := h.client.ShouldRateLimit(context.Background(), tt.req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", tt.name, err)
		}
	}
	// A null descriptor cannot cross the wire (it arrives empty); in
	// process it is refused.
	if _, err := h.srv.Service().ShouldRateLimit(context.Background(), request("api", nil)); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a null descriptor: %v, want InvalidArgument", err)
	}
	huge := strings.Repeat("v", 1<<20)
	// The three asks share a fixed window of a minute: never across its
	// end (a CI run saw the third answered in the next window).
	if left := time.Until(time.Now().Truncate(time.Minute).Add(time.Minute)); left < 3*time.Second {
		time.Sleep(left + 50*time.Millisecond)
	}
	for range 2 {
		resp := h.ask(t, request("api", desc("user="+huge)))
		if resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Errorf("a 1 MiB value: %s, want OK", outcome(resp))
		}
	}
	if got := outcome(h.ask(t, request("api", desc("user="+huge)))); got != "OK|OK:0" {
		t.Errorf("a 1 MiB value, third time: %s, want it limited as any other (OK|OK:0)", got)
	}
	if got := outcome(h.ask(t, request("api", withHits(desc("user=kim"), 1<<62)))); got != "OVER_LIMIT|OVER_LIMIT:3" {
		t.Errorf("hits_addend 2^62: %s, want OVER_LIMIT|OVER_LIMIT:3", got)
	}
	if n := rec.longest(); n > 300 {
		t.Errorf("the longest key the store saw is %d bytes", n)
	}
	if got := h.srv.Service().Stats().Invalid.Load(); got != int64(len(invalid)+1) {
		t.Errorf("Stats().Invalid = %d, want %d", got, len(invalid))
	}
}

// recorder is a store that remembers the longest key it was asked about.
type recorder struct {
	core.Store
	mu  sync.Mutex
	max int
}

func (r *recorder) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	r.note(req)
	return r.Store.Apply(ctx, req)
}

func (r *recorder) ApplyAll(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	for _, req := range reqs {
		r.note(req)
	}
	return r.Store.ApplyAll(ctx, reqs, out)
}

func (r *recorder) note(req core.Request) {
	r.mu.Lock()
	r.max = max(r.max, len(req.Key))
	r.mu.Unlock()
}

func (r *recorder) longest() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.max
}

func TestHeaders(t *testing.T) {
	t.Parallel()
	h := start(t, api, nil, func(c *Config) { c.Service = []Option{WithHeaders("", "", "")} })
	resp := h.ask(t, request("api", desc("user=lee"), desc("tenant=lee")))
	got := map[string]string{}
	for _, hv := range resp.ResponseHeadersToAdd {
		got[hv.Key] = hv.Value
	}
	// The binding descriptor is the one with the least left: user, 2 of 3.
	if got["RateLimit-Limit"] != "3" || got["RateLimit-Remaining"] != "2" {
		t.Errorf("headers = %v, want RateLimit-Limit 3, RateLimit-Remaining 2", got)
	}
	if r := got["RateLimit-Reset"]; r == "" || r == "0" || len(r) > 2 {
		t.Errorf("RateLimit-Reset = %q, want 1 to 60 seconds", r)
	}
}
