package serve_test

import (
	"context"
	"fmt"
	"log"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/serve"
	"github.com/sluicehq/sluice/serve/limits"
	"github.com/sluicehq/sluice/stores/memstore"
)

// A service deciding in memory under a configuration in
// envoyproxy/ratelimit's format, asked as Envoy would ask it: a user's
// limit and a login path's, in one request. The second request is over
// the login limit, so neither limit is charged: the user still has 99.
func Example() {
	set, err := limits.Parse(limits.Options{}, limits.File{Name: "api.yaml", Data: []byte(`
domain: api
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: path
    value: /login
    rate_limit: {unit: hour, requests_per_unit: 1}
`)})
	if err != nil {
		log.Fatal(err)
	}
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	svc, err := serve.NewService(store, set)
	if err != nil {
		log.Fatal(err)
	}
	entry := func(k, v string) *ratelimitv3.RateLimitDescriptor {
		return &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: k, Value: v}}}
	}
	req := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{entry("user", "alice"), entry("path", "/login")}}
	for range 2 {
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Print(resp.OverallCode)
		for _, st := range resp.Statuses {
			fmt.Printf(" %s:%d", st.Code, st.LimitRemaining)
		}
		fmt.Println()
	}
	// Output:
	// OK OK:99 OK:0
	// OVER_LIMIT OK:99 OVER_LIMIT:0
}
