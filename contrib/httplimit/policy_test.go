package httplimit_test

import (
	"net/http"
	"sync"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/contrib/httplimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/policy"
)

// TestShadowPolicy checks shadow mode as package policy decides it: a
// stack over policy.New(store, policy.WithShadow(...)) passes every
// request, with the headers of the decision enforcement would have made
// (and no Retry-After), while the record function sees each denial.
func TestShadowPolicy(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var denials []string
	shadow, err := policy.New(newStore(t), policy.WithShadow(func(req core.Request, real core.Decision) {
		mu.Lock()
		defer mu.Unlock()
		denials = append(denials, req.Algorithm.Name())
	}))
	if err != nil {
		t.Fatal(err)
	}
	stack := newStack(t, shadow,
		sluice.Rule{Name: "user", Algorithm: algorithms.TokenBucket, Limit: core.PerHour(1)},
		sluice.Rule{Name: "global", Algorithm: algorithms.TokenBucket, Limit: core.PerHour(100)})
	srv := serve(t, newMiddleware(t, stack, httplimit.WithKey("global", httplimit.GlobalKey)))
	const policyH = "RateLimit-Policy: \"user\";q=1;w=3600, \"global\";q=100;w=3600\n"
	for i, want := range []string{
		policyH + "RateLimit: \"user\";r=0;t=3600\n",
		policyH + "RateLimit: \"user\";r=0;t=3600\n", // denied by "user", served in shadow
		policyH + "RateLimit: \"user\";r=0;t=3600\n",
	} {
		r := get(t, srv.URL)
		if r.status != http.StatusOK || r.body != "ok" {
			t.Errorf("request %d: %d %q, want 200 ok", i, r.status, r.body)
		}
		if got := limitHeaders(r.header); got != want {
			t.Errorf("request %d: headers\n%s\nwant\n%s", i, got, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(denials) != 2 || denials[0] != "token-bucket/user" {
		t.Errorf("the shadow record saw %q, want two denials by token-bucket/user", denials)
	}
}
