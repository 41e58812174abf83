package httplimit_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/contrib/httplimit"
	"github.com/sluicehq/sluice/stores/memstore"
)

// A server behind a reverse proxy on the loopback network, limited to 2
// requests an hour per client (the address the proxy appended to
// X-Forwarded-For) and 1000 an hour for everyone together. Both rules are
// charged all or nothing: the denied third request costs the global rule
// nothing. The store's clock is stuck, so that the output does not depend
// on how fast the example runs.
func Example() {
	stuck := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	store, err := memstore.New(memstore.Config{Now: func() time.Time { return stuck }})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	stack, err := sluice.NewStack(store,
		sluice.Rule{Name: "per-client", Algorithm: algorithms.SlidingWindowLog, Limit: sluice.PerHour(2)},
		sluice.Rule{Name: "global", Algorithm: algorithms.TokenBucket, Limit: sluice.PerHour(1000)},
	)
	if err != nil {
		panic(err)
	}
	limit, err := httplimit.New(stack,
		httplimit.WithKey("global", httplimit.GlobalKey),
		// "per-client" has no WithKey: the client's address keys it.
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
	v, err := stack.Peek(context.Background(), "ip:203.0.113.9", "global")
	if err != nil {
		panic(err)
	}
	fmt.Println("global left after one more:", v.Rules()[1].Remaining)
	// Output:
	// 200 OK
	//   RateLimit-Policy: "per-client";q=2;w=3600, "global";q=1000;w=3600
	//   RateLimit: "per-client";r=1;t=3600
	// 200 OK
	//   RateLimit-Policy: "per-client";q=2;w=3600, "global";q=1000;w=3600
	//   RateLimit: "per-client";r=0;t=3600
	// 429 Too Many Requests
	//   RateLimit-Policy: "per-client";q=2;w=3600, "global";q=1000;w=3600
	//   RateLimit: "per-client";r=0;t=3600
	//   Retry-After: 3600
	//   Content-Type: application/problem+json
	// global left after one more: 997
}

// A server that shapes its traffic as nginx's limit_req rate=10r/s
// burst=2 does: requests leave one at a time, 100 ms apart, at most 2
// waiting their turn; the one that finds the line full is refused at
// once, told to come back when a place frees. The store's clock is stuck,
// so that the requests, sent one after another, find the line as the
// ones before them left it: the second waits 100 ms, the third 200 ms.
func ExampleWithQueue() {
	stuck := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	store, err := memstore.New(memstore.Config{Now: func() time.Time { return stuck }})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	stack, err := sluice.NewStack(store,
		sluice.Rule{Name: "api", Algorithm: algorithms.GCRA, Limit: sluice.PerSecond(10).WithBurst(1)})
	if err != nil {
		panic(err)
	}
	shape, err := httplimit.New(stack, httplimit.WithQueue(2), httplimit.WithKey("api", httplimit.GlobalKey))
	if err != nil {
		panic(err)
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello\n") })
	srv := httptest.NewServer(shape.Handler(hello))
	defer srv.Close()

	for range 4 {
		resp, err := http.Get(srv.URL)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(resp.Status)
		if v := resp.Header.Get("Retry-After"); v != "" {
			fmt.Println("  Retry-After:", v)
		}
	}
	// Output:
	// 200 OK
	// 200 OK
	// 200 OK
	// 429 Too Many Requests
	//   Retry-After: 1
}
