package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	mnoop "go.opentelemetry.io/otel/metric/noop"
	tnoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/contrib/httplimit"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/layered"
	"github.com/sluicehq/sluice/stores/redisstore"
	"github.com/sluicehq/sluice/telemetry"
)

// The tests of this file run against redis-servers of their own, which
// keep time by their own clocks: the limits are hours and days, so that
// the few milliseconds a test takes never change a header's whole
// seconds (a wait of 1200 s less a few ms is sent as 1200).

// newRedisStore returns a redisstore on a client of addr, both closed
// when the test ends.
func newRedisStore(t testing.TB, addr string) *redisstore.Store {
	t.Helper()
	// MaxRetries -1: a script whose reply timed out may have run.
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second,
		DialerRetries: 1, DialerRetryTimeout: time.Millisecond})
	t.Cleanup(func() { client.Close() })
	s, err := redisstore.New(client, redisstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// fullChain returns the production chain over a redis-server of addr:
// telemetry (with no-op providers), policy, a fail-closed breaker whose
// per-call deadline is generous (a loaded test machine must not trip it:
// a trip would answer 503s and fail the test loudly), a layered deny
// cache, and redisstore.
func fullChain(t testing.TB, addr string) sluice.Store {
	t.Helper()
	lay, err := layered.New(newRedisStore(t, addr), layered.Config{})
	if err != nil {
		t.Fatal(err)
	}
	br, err := policy.NewBreaker(lay, policy.WithMode(policy.FailClosed), policy.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.New(br)
	if err != nil {
		t.Fatal(err)
	}
	tel, err := telemetry.New(pol, telemetry.WithTracerProvider(tnoop.NewTracerProvider()), telemetry.WithMeterProvider(mnoop.NewMeterProvider()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tel.Close() })
	return tel
}

// TestQuotaLeak is the bug the stack fixed: a per-minute limit of 10 in
// front of a per-day limit of 1, on a real redis-server. The first request
// passes; every later one is denied by the daily rule and charges neither
// rule, so the per-minute rule keeps 9 of its 10 (charged in turn, as the
// middleware once did, it fell to 5 after four denials).
func TestQuotaLeak(t *testing.T) {
	t.Parallel()
	stack := newStack(t, newRedisStore(t, redistest.Start(t).Addr()),
		sluice.Rule{Name: "per-minute", Algorithm: algorithms.TokenBucket, Limit: sluice.PerMinute(10)},
		sluice.Rule{Name: "per-day", Algorithm: algorithms.TokenBucket, Limit: sluice.PerDay(1)})
	srv := serve(t, newMiddleware(t, stack))
	ctx := context.Background()
	const key = "ip:127.0.0.1"
	// A peek reports the decision Allow would make: 9 left is Remaining 8.
	peek := func(step int) {
		t.Helper()
		v, err := stack.Peek(ctx, key, key)
		if err != nil {
			t.Fatal(err)
		}
		if got := v.Rules()[0].Remaining; got != 8 {
			t.Errorf("step %d: per-minute peek says %d would remain, want 8 (9 left)", step, got)
		}
		if d := v.Rules()[1]; d.Allowed || d.Remaining != 0 {
			t.Errorf("step %d: per-day peek %+v, want a denial", step, d)
		}
	}
	for i, want := range []int{200, 429, 429, 429, 429} {
		r := get(t, srv.URL)
		if r.status != want {
			t.Fatalf("step %d: %d, want %d", i, r.status, want)
		}
		wantHeaders := "RateLimit-Policy: \"per-minute\";q=10;w=60, \"per-day\";q=1;w=86400\nRateLimit: \"per-day\";r=0;t=86400\n"
		if want == 429 {
			wantHeaders += "Retry-After: 86400\n"
			if got := violated(t, r.body); !slices.Equal(got, []string{"per-day"}) {
				t.Errorf("step %d: violated-policies %q, want [per-day]", i, got)
			}
		}
		if got := limitHeaders(r.header); got != wantHeaders {
			t.Errorf("step %d: headers\n%s\nwant\n%s", i, got, wantHeaders)
		}
		peek(i)
	}
}

// threeRules is a stack's rules per user, per tenant and for everyone.
func threeRules(user, tenant, global sluice.Limit) []sluice.Rule {
	return []sluice.Rule{
		{Name: "user", Algorithm: algorithms.TokenBucket, Limit: user},
		{Name: "tenant", Algorithm: algorithms.SlidingWindowLog, Limit: tenant},
		{Name: "global", Algorithm: algorithms.GCRA, Limit: global},
	}
}

// threeKeys keys the rules of threeRules: the user by an API key, the
// tenant by a header, everyone by one key.
var threeKeys = []httplimit.Option{
	httplimit.WithKey("user", httplimit.HeaderKey("X-API-Key")),
	httplimit.WithKey("tenant", httplimit.HeaderKey("X-Tenant")),
	httplimit.WithKey("global", httplimit.GlobalKey),
}

// TestFullChain runs a stack of three rules (3 an hour per user, 5 an
// hour per tenant, 8 an hour for everyone) through the production chain
// on a real redis-server, and compares every response's rate-limit
// headers, byte for byte, with what the rules must say.
func TestFullChain(t *testing.T) {
	t.Parallel()
	addr := redistest.Start(t).Addr()
	rules := threeRules(sluice.PerHour(3), sluice.PerHour(5), sluice.PerHour(8))
	srv := serve(t, newMiddleware(t, newStack(t, fullChain(t, addr), rules...), threeKeys...))
	const policyH = "RateLimit-Policy: \"user\";q=3;w=3600, \"tenant\";q=5;w=3600, \"global\";q=8;w=3600\n"
	for i, s := range []struct {
		user, tenant string
		status       int
		headers      string // after RateLimit-Policy
		violated     []string
	}{
		// user: a token every 1200 s; tenant: each request leaves the log
		// an hour later; global: GCRA, 450 s a request.
		// user 2/3, tenant 4/5, global 7/8: the user binds.
		{"bob", "acme", 200, "RateLimit: \"user\";r=2;t=1200\n", nil},
		// user 1/3, tenant 3/5, global 6/8.
		{"bob", "acme", 200, "RateLimit: \"user\";r=1;t=2400\n", nil},
		// alice 2/3, tenant 2/5 (0.4 < 0.67).
		{"alice", "acme", 200, "RateLimit: \"tenant\";r=2;t=3600\n", nil},
		// alice 1/3, tenant 1/5.
		{"alice", "acme", 200, "RateLimit: \"tenant\";r=1;t=3600\n", nil},
		// alice 0/3, tenant 0/5: equal fractions, the first binds.
		{"alice", "acme", 200, "RateLimit: \"user\";r=0;t=3600\n", nil},
		// alice and acme both deny: alice's next token comes in 1200 s,
		// acme's oldest request leaves the log in 3600 s, which binds.
		{"alice", "acme", 429, "RateLimit: \"tenant\";r=0;t=3600\nRetry-After: 3600\n", []string{"user", "tenant"}},
		// carol is new, but acme is full: the tenant alone denies.
		{"carol", "acme", 429, "RateLimit: \"tenant\";r=0;t=3600\nRetry-After: 3600\n", []string{"tenant"}},
		// Another tenant: 5 requests so far, global 3/8 left after this
		// one's charge... 2/8 (0.25) binds.
		{"erin", "globex", 200, "RateLimit: \"global\";r=2;t=2700\n", nil},
		{"frank", "globex", 200, "RateLimit: \"global\";r=1;t=3150\n", nil},
		{"gina", "globex", 200, "RateLimit: \"global\";r=0;t=3600\n", nil},
		// The whole service is spent: the next request passes in 450 s.
		{"hank", "globex", 429, "RateLimit: \"global\";r=0;t=450\nRetry-After: 450\n", []string{"global"}},
	} {
		r := get(t, srv.URL, "X-API-Key: "+s.user, "X-Tenant: "+s.tenant)
		if r.status != s.status {
			t.Errorf("step %d (%s@%s): %d, want %d (%s)", i, s.user, s.tenant, r.status, s.status, r.body)
		}
		if got, want := limitHeaders(r.header), policyH+s.headers; got != want {
			t.Errorf("step %d (%s@%s): headers\n%s\nwant\n%s", i, s.user, s.tenant, got, want)
		}
		if r.status == 429 {
			if got := violated(t, r.body); !slices.Equal(got, s.violated) {
				t.Errorf("step %d (%s@%s): violated-policies %q, want %q", i, s.user, s.tenant, got, s.violated)
			}
		}
	}
	// Nothing denied was charged: carol's budget is whole, and the
	// service's 8 went to the 8 requests served. The peek asks Redis
	// itself, not the chain's cache of denials.
	v, err := newStack(t, newRedisStore(t, addr), rules...).Peek(context.Background(), "x-api-key:carol", "x-tenant:initech", "global")
	if err != nil {
		t.Fatal(err)
	}
	if v.Rules()[0].Remaining != 2 || v.Rules()[1].Remaining != 4 || v.Rules()[2].Allowed {
		t.Errorf("peek after the run: %+v, want carol 2 (after one more), initech 4, global denied", v.Rules())
	}
}

// TestFullChainConcurrent sends one request from each of 64 users of one
// tenant at once, through the production chain on a real redis-server:
// exactly the tenant's 20 pass, the global rule is charged exactly those
// 20, and no denied user was charged.
func TestFullChainConcurrent(t *testing.T) {
	t.Parallel()
	addr := redistest.Start(t).Addr()
	rules := threeRules(sluice.PerHour(3), sluice.PerHour(20), sluice.PerHour(40))
	srv := serve(t, newMiddleware(t, newStack(t, fullChain(t, addr), rules...), threeKeys...))
	const clients = 64
	status := make([]int, clients)
	errs := make([]error, clients)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range clients {
		wg.Go(func() {
			<-start
			r, err := tryGet(srv.URL, fmt.Sprintf("X-API-Key: user%d", i), "X-Tenant: acme")
			status[i], errs[i] = r.status, err
		})
	}
	close(start)
	wg.Wait()
	counts := map[int]int{}
	for i := range clients {
		if errs[i] != nil {
			t.Fatalf("client %d: %v", i, errs[i])
		}
		counts[status[i]]++
	}
	if counts[200] != 20 || counts[429] != clients-20 {
		t.Errorf("statuses %v, want exactly 20 × 200 and %d × 429", counts, clients-20)
	}
	ctx := context.Background()
	redisOnly := newStack(t, newRedisStore(t, addr), rules...) // peeks past the chain's cache
	for i := range clients {
		v, err := redisOnly.Peek(ctx, fmt.Sprintf("x-api-key:user%d", i), "x-tenant:other", "global")
		if err != nil {
			t.Fatal(err)
		}
		// A peek says what one more would leave: 2 for a user charged
		// nothing, 1 for one charged once.
		want := int64(2)
		if status[i] == 200 {
			want = 1
		}
		if got := v.Rules()[0].Remaining; got != want {
			t.Errorf("user%d (%d): peek says %d would remain, want %d", i, status[i], got, want)
		}
		if i == 0 {
			if got := v.Rules()[2].Remaining; got != 19 {
				t.Errorf("global: peek says %d would remain, want 19 (40 less the 20 served, less one more)", got)
			}
		}
	}
}

// TestBreakerModes kills the redis-server behind a breaker: in fail-closed
// mode the middleware answers 503 (through the error handler, with
// ErrFailClosed), in fail-open mode it serves the request without
// rate-limit headers, since a fail-open decision knows no limit.
func TestBreakerModes(t *testing.T) {
	t.Parallel()
	redisSrv := redistest.Start(t)
	remote := newRedisStore(t, redisSrv.Addr())
	br, err := policy.NewBreaker(remote, policy.WithMode(policy.FailClosed), policy.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { br.Close() })
	open, err := br.WithMode(policy.FailOpen)
	if err != nil {
		t.Fatal(err)
	}
	rules := threeRules(sluice.PerHour(3), sluice.PerHour(5), sluice.PerHour(8))
	var gotErr error
	closedSrv := serve(t, newMiddleware(t, newStack(t, br, rules...), append(threeKeys,
		httplimit.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
			gotErr = err
			httplimit.WriteUnavailable(w, r, err)
		}))...))
	openSrv := serve(t, newMiddleware(t, newStack(t, open, rules...), threeKeys...))
	hdr := []string{"X-API-Key: alice", "X-Tenant: acme"}
	if r := get(t, closedSrv.URL, hdr...); r.status != 200 || r.header.Get("RateLimit") != `"user";r=2;t=1200` {
		t.Fatalf("Redis up: %d %s, want 200 with the user's headers", r.status, r.header.Get("RateLimit"))
	}
	if err := redisSrv.Kill(); err != nil {
		t.Fatal(err)
	}
	r := get(t, closedSrv.URL, hdr...)
	if r.status != 503 || limitHeaders(r.header) != "" || !errors.Is(gotErr, httplimit.ErrFailClosed) {
		t.Errorf("fail-closed, Redis down: %d, headers %q, error %v; want 503, none, ErrFailClosed", r.status, limitHeaders(r.header), gotErr)
	}
	r = get(t, openSrv.URL, hdr...)
	if r.status != 200 || r.body != "ok" || limitHeaders(r.header) != "" {
		t.Errorf("fail-open, Redis down: %d %q, headers %q; want 200 ok without headers", r.status, r.body, limitHeaders(r.header))
	}
	// Without a breaker, the store's error reaches the error handler.
	gotErr = nil
	bareSrv := serve(t, newMiddleware(t, newStack(t, remote, rules...), append(threeKeys,
		httplimit.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
			gotErr = err
			httplimit.WriteUnavailable(w, r, err)
		}))...))
	if r := get(t, bareSrv.URL, hdr...); r.status != 503 || gotErr == nil || errors.Is(gotErr, httplimit.ErrFailClosed) {
		t.Errorf("no breaker, Redis down: %d, error %v; want 503 with the store's error", r.status, gotErr)
	}
}
