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
)

// TestAllotmentInRequest decides a request of an allotted descriptor and an
// ordinary one: the allotted one is spent from this instance's allotment, the
// other decided at the store, and when the other is over its limit the
// allotted charge is refunded, so that the request charges nothing: what
// the store holds and the allotment holds add up to the limit less what was
// admitted.
func TestAllotmentInRequest(t *testing.T) {
	t.Parallel()
	set, err := limits.Parse(limits.Options{}, limits.File{Name: "l.yaml", Data: []byte(`
domain: api
descriptors:
  - key: hot
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
	lay, err := layered.New(mem, layered.Config{Allot: func(r core.Request) int64 { return limits.AllotmentOf(r.Algorithm) }})
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
	ask := func() *rlsv3.RateLimitResponse {
		t.Helper()
		resp, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{d("hot", "x"), d("user", "a")}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	hot := set.Match("api", []limits.Entry{{Key: "hot", Value: "x"}})
	atStore := func() int64 {
		t.Helper()
		d, err := mem.Apply(context.Background(), core.Request{Key: hot.Key, Algorithm: hot.Rule.Algorithm, Limit: hot.Rule.Limit, Cost: 1, Op: core.OpPeek})
		if err != nil {
			t.Fatal(err)
		}
		return d.Remaining
	}
	var taken int64
	for i, want := range []struct {
		code      rlsv3.RateLimitResponse_Code
		remaining uint32 // hot's
	}{
		{rlsv3.RateLimitResponse_OK, 999},
		{rlsv3.RateLimitResponse_OK, 998},
		{rlsv3.RateLimitResponse_OVER_LIMIT, 998}, // not charged
		// The refund went back into the allotment, so the allotment's remaining
		// still reads what the instance holds.
		{rlsv3.RateLimitResponse_OVER_LIMIT, 998},
	} {
		resp := ask()
		if resp.OverallCode != want.code || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != want.remaining {
			t.Fatalf("request %d: %v, want %v with hot OK, %d left", i+1, resp, want.code, want.remaining)
		}
		if i == 0 {
			taken = 1000 - atStore() // the first allotment
		}
	}
	// No other take, and no refund asked of the store: the two denied
	// requests' hot charges went back into the allotment.
	if got, want := atStore(), 1000-taken; got != want {
		t.Errorf("hot's remaining at the store %d, want %d: an allotment of %d taken, and the 2 denied requests' charges refunded into the allotment", got, want, taken)
	}
	// Allotted, not asked of the store: hot alone.
	resp, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{d("hot", "x")}})
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("hot alone: %v, %v", resp, err)
	}
}
