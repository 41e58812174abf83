package httplimit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/contrib/httplimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores/memstore"
)

// A server limited to 2 requests an hour per client, behind a reverse
// proxy on the loopback network: the client is the address the proxy
// appended to X-Forwarded-For. The store's clock is stuck, so that the
// output does not depend on how fast the example runs.
func Example() {
	stuck := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	store, err := memstore.New(memstore.Config{Now: func() time.Time { return stuck }})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	limiter, err := core.NewLimiter(store, algorithms.SlidingWindowLog, core.PerHour(2))
	if err != nil {
		panic(err)
	}
	limit, err := httplimit.New(limiter,
		httplimit.WithPolicyName("hourly"),
		httplimit.WithTrustedProxies([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}),
	)
	if err != nil {
		panic(err)
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello\n") })
	srv := httptest.NewServer(limit.Handler(hello))
	defer srv.Close()

	for range 3 {
		req, _ := http.NewRequest("GET", srv.URL, nil)
		req.Header.Set("X-Forwarded-For", "203.0.113.9")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(resp.Status)
		for _, name := range []string{"RateLimit-Policy", "RateLimit", "Retry-After", "Content-Type"} {
			if v := resp.Header.Get(name); v != "" && (name != "Content-Type" || resp.StatusCode != 200) {
				fmt.Printf("  %s: %s\n", name, v)
			}
		}
	}
	// Output:
	// 200 OK
	//   RateLimit-Policy: "hourly";q=2;w=3600
	//   RateLimit: "hourly";r=1;t=3600
	// 200 OK
	//   RateLimit-Policy: "hourly";q=2;w=3600
	//   RateLimit: "hourly";r=0;t=3600
	// 429 Too Many Requests
	//   RateLimit-Policy: "hourly";q=2;w=3600
	//   RateLimit: "hourly";r=0;t=3600
	//   Retry-After: 3600
	//   Content-Type: application/problem+json
}
