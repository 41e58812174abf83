package serve

import (
	"context"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/serve/limits"
	"github.com/sluicehq/sluice/stores/layered"
	"github.com/sluicehq/sluice/stores/memstore"
	"github.com/sluicehq/sluice/stores/storetest"
)

// TestAllotmentInRequest decides requests of several descriptors through
// a layered store that takes allotments. A request whose descriptors all
// have allotments is one batch that the layered store answers from them:
// after each descriptor's first take, no store call at all. A request
// with a descriptor that has none is one batch that goes to the store
// whole, atomically: a denial charges nothing, and the allotments are
// left as they were.
func TestAllotmentInRequest(t *testing.T) {
	t.Parallel()
	set, err := limits.Parse(limits.Options{}, limits.File{Name: "l.yaml", Data: []byte(`
domain: api
descriptors:
  - key: hot
    rate_limit: {unit: hour, requests_per_unit: 1000, allotment: 100}
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 1000, allotment: 100}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 2}
`)})
	if err != nil {
		t.Fatal(err)
	}
	mem, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	counter := storetest.NewCounter(mem)
	lay, err := layered.New(counter, layered.Config{Allot: func(r core.Request) int64 { return limits.AllotmentOf(r.Algorithm) }})
	if err != nil {
		t.Fatal(err)
	}
	defer lay.Close()
	svc, err := NewService(lay, set)
	if err != nil {
		t.Fatal(err)
	}
	d := func(k, v string) *ratelimitv3.RateLimitDescriptor {
		return &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: k, Value: v}}}
	}
	ask := func(ds ...*ratelimitv3.RateLimitDescriptor) (*rlsv3.RateLimitResponse, int64) {
		t.Helper()
		a0, b0, _ := counter.Counts()
		resp, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "api", Descriptors: ds})
		if err != nil {
			t.Fatal(err)
		}
		a1, b1, _ := counter.Counts()
		return resp, a1 - a0 + b1 - b0
	}
	atStore := func(key string) int64 {
		t.Helper()
		m := set.Match("api", []limits.Entry{{Key: key, Value: "x"}})
		d, err := mem.Apply(context.Background(), core.Request{Key: m.Key, Op: core.OpPeek, Terms: &core.Terms{Algorithm: m.Rule.Algorithm, Limit: m.Rule.Limit}})
		if err != nil {
			t.Fatal(err)
		}
		return d.Remaining
	}

	// Both descriptors allotted: one take each, then none.
	for i, want := range []int64{2, 0, 0} {
		resp, calls := ask(d("hot", "x"), d("tenant", "x"))
		if resp.OverallCode != rlsv3.RateLimitResponse_OK || calls != want {
			t.Errorf("allotted request %d = %v after %d store calls, want OK after %d", i+1, resp.OverallCode, calls, want)
		}
	}
	taken := 1000 - atStore("hot")
	if taken < 3 || taken > 100 || atStore("tenant") != 1000-taken {
		t.Fatalf("the store holds %d and %d, want the same allotment of 3 to 100 taken from each", atStore("hot"), atStore("tenant"))
	}

	// With a descriptor that has no allotment, the request is the
	// store's, whole, in one call: hot is charged there, and a denial
	// charges nothing (the last is the user's denial, cached).
	for i, want := range []struct {
		code  rlsv3.RateLimitResponse_Code
		calls int64
	}{
		{rlsv3.RateLimitResponse_OK, 1},
		{rlsv3.RateLimitResponse_OK, 1},
		{rlsv3.RateLimitResponse_OVER_LIMIT, 1},
		{rlsv3.RateLimitResponse_OVER_LIMIT, 0},
	} {
		resp, calls := ask(d("hot", "x"), d("user", "a"))
		if resp.OverallCode != want.code || calls != want.calls || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OK {
			t.Errorf("mixed request %d = %v after %d store calls; want %v, hot OK, after %d", i+1, resp, calls, want.code, want.calls)
		}
	}
	if got, want := atStore("hot"), 1000-taken-2; got != want {
		t.Errorf("hot's remaining at the store %d, want %d: its allotment, and the 2 admitted mixed requests", got, want)
	}
	// hot's allotment was left as it was: the allotted request still
	// makes no call.
	if resp, calls := ask(d("hot", "x"), d("tenant", "x")); resp.OverallCode != rlsv3.RateLimitResponse_OK || calls != 0 {
		t.Errorf("allotted request after the mixed ones = %v after %d store calls, want OK with none", resp.OverallCode, calls)
	}
}
