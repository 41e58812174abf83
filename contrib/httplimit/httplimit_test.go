package httplimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/contrib/httplimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores"
	"github.com/sluicehq/sluice/stores/memstore"
)

// t0 is the instant every test store's clock is stuck at, so that no
// result depends on how fast the machine runs.
var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// newStore returns a memstore whose clock reads t0.
func newStore(t testing.TB) *memstore.Store {
	t.Helper()
	s, err := memstore.New(memstore.Config{SweepInterval: -1, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// newStack returns a stack of rules over s.
func newStack(t testing.TB, s core.Store, rules ...sluice.Rule) *sluice.Stack {
	t.Helper()
	st, err := sluice.NewStack(s, rules...)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// oneRule returns a stack of one rule, "default", over s.
func oneRule(t testing.TB, s core.Store, alg core.Algorithm, l core.Limit) *sluice.Stack {
	t.Helper()
	return newStack(t, s, sluice.Rule{Name: "default", Algorithm: alg, Limit: l})
}

func newMiddleware(t testing.TB, stack *sluice.Stack, opts ...httplimit.Option) *httplimit.Middleware {
	t.Helper()
	m, err := httplimit.New(stack, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// serve starts a real server whose handler, behind m, answers "ok".
func serve(t testing.TB, m *httplimit.Middleware) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	})))
	t.Cleanup(srv.Close)
	return srv
}

// reply is what a test keeps of a response.
type reply struct {
	status int
	header http.Header
	body   string
}

// get sends a GET to url with the given header fields ("Name: value").
func get(t testing.TB, url string, fields ...string) reply {
	t.Helper()
	r, err := tryGet(url, fields...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// tryGet is get for goroutines other than the test's.
func tryGet(url string, fields ...string) (reply, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return reply{}, err
	}
	for _, f := range fields {
		name, value, _ := strings.Cut(f, ": ")
		req.Header.Add(name, value)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	return reply{resp.StatusCode, resp.Header, string(body)}, nil
}

// limitHeaders returns the rate-limit fields of h, one "Name: value" line
// each, in a fixed order.
func limitHeaders(h http.Header) string {
	var b strings.Builder
	for _, name := range []string{
		"RateLimit-Policy", "RateLimit", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset",
		"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After",
	} {
		for _, v := range h.Values(name) {
			fmt.Fprintf(&b, "%s: %s\n", name, v)
		}
	}
	return b.String()
}

// violated returns the violated-policies of a problem details body.
func violated(t testing.TB, body string) []string {
	t.Helper()
	var p struct {
		Violated []string `json:"violated-policies"`
	}
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	return p.Violated
}

// TestHeaderFormats checks every header set, byte for byte, over a real
// server: a token bucket of 10/s with a burst of 50, at a stuck clock.
func TestHeaderFormats(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		headers httplimit.Headers
		want    string
	}{
		{"draft (default)", httplimit.HeadersDraft, `RateLimit-Policy: "default";q=50;w=5
RateLimit: "default";r=49;t=1
`},
		{"legacy", httplimit.HeadersLegacy, `RateLimit-Limit: 50
RateLimit-Remaining: 49
RateLimit-Reset: 1
`},
		{"x", httplimit.HeadersX, `X-RateLimit-Limit: 50
X-RateLimit-Remaining: 49
X-RateLimit-Reset: 1
`},
		{"x epoch", httplimit.HeadersXEpoch, `X-RateLimit-Limit: 50
X-RateLimit-Remaining: 49
X-RateLimit-Reset: 1893456001
`},
		{"all", httplimit.HeadersDraft | httplimit.HeadersLegacy | httplimit.HeadersX, `RateLimit-Policy: "default";q=50;w=5
RateLimit: "default";r=49;t=1
RateLimit-Limit: 50
RateLimit-Remaining: 49
RateLimit-Reset: 1
X-RateLimit-Limit: 50
X-RateLimit-Remaining: 49
X-RateLimit-Reset: 1
`},
		{"none", httplimit.HeadersNone, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stack := oneRule(t, newStore(t), algorithms.TokenBucket, core.PerSecond(10).WithBurst(50))
			srv := serve(t, newMiddleware(t, stack, httplimit.WithHeaders(tc.headers),
				httplimit.WithNow(func() time.Time { return t0.Add(300 * time.Millisecond) })))
			r := get(t, srv.URL)
			if r.status != http.StatusOK || r.body != "ok" {
				t.Fatalf("GET = %d %q, want 200 ok", r.status, r.body)
			}
			if got := limitHeaders(r.header); got != tc.want {
				t.Errorf("headers:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

// TestDefaultIsDraft checks that New without WithHeaders sends the
// draft's fields.
func TestDefaultIsDraft(t *testing.T) {
	t.Parallel()
	stack := oneRule(t, newStore(t), algorithms.FixedWindow, core.PerMinute(100))
	r := get(t, serve(t, newMiddleware(t, stack)).URL)
	want := "RateLimit-Policy: \"default\";q=100;w=60\nRateLimit: \"default\";r=99;t=60\n"
	if got := limitHeaders(r.header); got != want {
		t.Errorf("headers:\n%s\nwant:\n%s", got, want)
	}
}

// TestDenied checks the 429: status, headers, Retry-After and the
// problem details body, byte for byte.
func TestDenied(t *testing.T) {
	t.Parallel()
	stack := newStack(t, newStore(t), sluice.Rule{Name: "hourly", Algorithm: algorithms.TokenBucket, Limit: core.PerHour(1)})
	srv := serve(t, newMiddleware(t, stack))
	steps := []struct {
		status  int
		headers string
	}{
		{200, "RateLimit-Policy: \"hourly\";q=1;w=3600\nRateLimit: \"hourly\";r=0;t=3600\n"},
		{429, "RateLimit-Policy: \"hourly\";q=1;w=3600\nRateLimit: \"hourly\";r=0;t=3600\nRetry-After: 3600\n"},
	}
	var last reply
	for i, s := range steps {
		last = get(t, srv.URL)
		if last.status != s.status {
			t.Fatalf("step %d: status %d, want %d", i, last.status, s.status)
		}
		if got := limitHeaders(last.header); got != s.headers {
			t.Errorf("step %d: headers:\n%s\nwant:\n%s", i, got, s.headers)
		}
	}
	if ct := last.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type = %q, want application/problem+json", ct)
	}
	want := `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"detail":"Rate limit \"hourly\" exceeded: retry in 3600 s.","violated-policies":["hourly"]}` + "\n"
	if last.body != want {
		t.Errorf("body:\n%s\nwant:\n%s", last.body, want)
	}
	var p map[string]any
	if err := json.Unmarshal([]byte(last.body), &p); err != nil {
		t.Errorf("body is not JSON: %v", err)
	}
}

// TestRetryAfterRoundsUp checks that a wait of 100ms is sent as 1 second,
// in both Retry-After and t.
func TestRetryAfterRoundsUp(t *testing.T) {
	t.Parallel()
	stack := oneRule(t, newStore(t), algorithms.GCRA, core.PerSecond(10).WithBurst(1))
	srv := serve(t, newMiddleware(t, stack))
	get(t, srv.URL)
	r := get(t, srv.URL)
	want := "RateLimit-Policy: \"default\";q=1;w=1\nRateLimit: \"default\";r=0;t=1\nRetry-After: 1\n"
	if r.status != 429 || limitHeaders(r.header) != want {
		t.Errorf("second GET: %d\n%s\nwant 429\n%s", r.status, limitHeaders(r.header), want)
	}
}

// TestRetryAfterJitter checks that jitter only adds: Retry-After is never
// earlier than t, and never later than t plus the jitter.
func TestRetryAfterJitter(t *testing.T) {
	t.Parallel()
	stack := oneRule(t, newStore(t), algorithms.TokenBucket, core.PerMinute(1))
	srv := serve(t, newMiddleware(t, stack, httplimit.WithRetryJitter(10*time.Second)))
	get(t, srv.URL)
	seen := map[int]bool{}
	for i := range 40 {
		r := get(t, srv.URL)
		if r.status != 429 {
			t.Fatalf("request %d: status %d, want 429", i, r.status)
		}
		ra, err := strconv.Atoi(r.header.Get("Retry-After"))
		if err != nil {
			t.Fatal(err)
		}
		rl := r.header.Get("RateLimit")
		_, ts, _ := strings.Cut(rl, ";t=")
		tv, err := strconv.Atoi(ts)
		if err != nil {
			t.Fatalf("RateLimit %q: %v", rl, err)
		}
		if tv != 60 || ra < tv || ra > tv+10 {
			t.Fatalf("request %d: Retry-After %d, t %d; want t = 60 ≤ Retry-After ≤ 70", i, ra, tv)
		}
		seen[ra] = true
	}
	if len(seen) < 2 {
		t.Errorf("40 jittered Retry-After values were all %v", seen)
	}
}

// clock is a store clock that tests move by hand.
type clock struct{ µs atomic.Int64 }

func (c *clock) now() time.Time       { return t0.Add(time.Duration(c.µs.Load()) * time.Microsecond) }
func (c *clock) add(d time.Duration)  { c.µs.Add(int64(d / time.Microsecond)) }
func (c *clock) since() time.Duration { return time.Duration(c.µs.Load()) * time.Microsecond }

// TestRetryAfterIsEnough checks Retry-After against the store itself, for
// every algorithm and for limits whose waits are not whole seconds: a
// client that is denied and comes back exactly Retry-After seconds later
// is admitted. A Retry-After rounded down, or one earlier than t, fails.
func TestRetryAfterIsEnough(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		alg   core.Algorithm
		limit core.Limit
	}{
		{algorithms.TokenBucket, core.Per(3, 7*time.Second)},
		{algorithms.GCRA, core.Per(3, 7*time.Second).WithBurst(2)},
		{algorithms.FixedWindow, core.Per(2, 2500*time.Millisecond)},
		{algorithms.SlidingWindowCounter, core.Per(4, 3700*time.Millisecond)},
		{algorithms.SlidingWindowLog, core.Per(2, 1300*time.Millisecond)},
	} {
		t.Run(tc.alg.Name(), func(t *testing.T) {
			t.Parallel()
			var c clock
			c.add(123456 * time.Microsecond) // not on a second boundary
			s, err := memstore.New(memstore.Config{SweepInterval: -1, Now: c.now})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			srv := serve(t, newMiddleware(t, oneRule(t, s, tc.alg, tc.limit), httplimit.WithRetryJitter(time.Second)))
			denials := 0
			for i := 0; denials < 5; i++ {
				if i > 100 {
					t.Fatalf("%d requests and only %d denials", i, denials)
				}
				r := get(t, srv.URL)
				if r.status == http.StatusOK {
					c.add(150 * time.Millisecond) // keep charging, off the beat
					continue
				}
				denials++
				ra, err := strconv.Atoi(r.header.Get("Retry-After"))
				if r.status != http.StatusTooManyRequests || err != nil || ra < 1 {
					t.Fatalf("at %v: %d, Retry-After %q", c.since(), r.status, r.header.Get("Retry-After"))
				}
				_, ts, _ := strings.Cut(r.header.Get("RateLimit"), ";t=")
				if tv, err := strconv.Atoi(ts); err != nil || ra < tv {
					t.Fatalf("at %v: Retry-After %d is earlier than RateLimit %s", c.since(), ra, r.header.Get("RateLimit"))
				}
				c.add(time.Duration(ra) * time.Second)
				if r := get(t, srv.URL); r.status != http.StatusOK {
					t.Fatalf("at %v, after waiting Retry-After (%ds): %d, want 200", c.since(), ra, r.status)
				}
			}
		})
	}
}

// TestUnsatisfiable checks a cost above capacity: 429 without Retry-After,
// saying it will never pass.
func TestUnsatisfiable(t *testing.T) {
	t.Parallel()
	stack := oneRule(t, newStore(t), algorithms.TokenBucket, core.PerMinute(2))
	srv := serve(t, newMiddleware(t, stack, httplimit.WithCost(func(*http.Request) int64 { return 5 })))
	r := get(t, srv.URL)
	if r.status != 429 || r.header.Get("Retry-After") != "" {
		t.Errorf("status %d, Retry-After %q; want 429 and none", r.status, r.header.Get("Retry-After"))
	}
	want := `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"detail":"Rate limit \"default\" admits at most 2 at once; this request costs 5 and will never be admitted.","violated-policies":["default"]}` + "\n"
	if r.body != want {
		t.Errorf("body:\n%s\nwant:\n%s", r.body, want)
	}
}

// failing is a store that always fails.
var failing = stores.Func(func(context.Context, core.Request) (core.Decision, error) {
	return core.Decision{}, errors.New("connection refused")
})

// answering returns a store that answers d to every request.
func answering(d core.Decision) core.Store {
	return stores.Func(func(context.Context, core.Request) (core.Decision, error) { return d, nil })
}

// TestOutcomes checks the status of every outcome over a real server,
// each from a store that answers it: the middleware reads the decision's
// source and nothing else.
func TestOutcomes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		store   core.Store
		status  int
		headers string
	}{
		{"store error: 503", failing, 503, ""},
		{"fail-closed: 503", answering(core.Decision{RetryAfter: time.Second, Source: core.SourceFailClosed}), 503, ""},
		{"fail-open: 200 without headers", answering(core.Decision{Allowed: true, Source: core.SourceFailOpen}), 200, ""},
		{"shadow: 200 with headers", answering(core.Decision{Allowed: true, Limit: 10, ResetAfter: 1500 * time.Millisecond, Source: core.SourceShadow}), 200,
			"RateLimit-Policy: \"default\";q=10;w=1\nRateLimit: \"default\";r=0;t=2\n"},
		{"degraded: 200 with headers", answering(core.Decision{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: 100 * time.Millisecond, Source: core.SourceDegraded}), 200,
			"RateLimit-Policy: \"default\";q=10;w=1\nRateLimit: \"default\";r=4;t=1\n"},
		{"denial: 429", answering(core.Decision{Limit: 10, RetryAfter: time.Second}), 429,
			"RateLimit-Policy: \"default\";q=10;w=1\nRateLimit: \"default\";r=0;t=1\nRetry-After: 1\n"},
		{"degraded denial: 429", answering(core.Decision{Limit: 5, RetryAfter: 2 * time.Second, Source: core.SourceDegraded}), 429,
			"RateLimit-Policy: \"default\";q=10;w=1\nRateLimit: \"default\";r=0;t=2\nRetry-After: 2\n"},
		{"denial without a wait: Retry-After is still t", answering(core.Decision{Limit: 10, ResetAfter: 4500 * time.Millisecond}), 429,
			"RateLimit-Policy: \"default\";q=10;w=1\nRateLimit: \"default\";r=0;t=5\nRetry-After: 5\n"},
		{"deny list: 429 without Retry-After", answering(core.Decision{RetryAfter: core.RetryNever, Source: core.SourceDenyList}), 429, ""},
		{"unlimited: 200 without headers", answering(core.Unlimited()), 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stack := oneRule(t, tc.store, algorithms.TokenBucket, core.PerSecond(10))
			r := get(t, serve(t, newMiddleware(t, stack)).URL)
			if r.status != tc.status {
				t.Errorf("status %d, want %d", r.status, tc.status)
			}
			if got := limitHeaders(r.header); got != tc.headers {
				t.Errorf("headers:\n%s\nwant:\n%s", got, tc.headers)
			}
			switch r.status {
			case 200:
				if r.body != "ok" {
					t.Errorf("body %q, want the handler's", r.body)
				}
			case 503:
				want := `{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"The rate limiter cannot decide now: its store is unavailable."}` + "\n"
				if r.body != want || r.header.Get("Content-Type") != "application/problem+json" {
					t.Errorf("503 body %q (%s)", r.body, r.header.Get("Content-Type"))
				}
			}
		})
	}
}

// TestDenyListBody checks the detail of a deny list's denial.
func TestDenyListBody(t *testing.T) {
	t.Parallel()
	stack := oneRule(t, answering(core.Decision{RetryAfter: core.RetryNever, Source: core.SourceDenyList}), algorithms.TokenBucket, core.PerSecond(10))
	r := get(t, serve(t, newMiddleware(t, stack)).URL)
	want := `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"detail":"Rate limit \"default\" does not admit this client.","violated-policies":["default"]}` + "\n"
	if r.body != want {
		t.Errorf("body:\n%s\nwant:\n%s", r.body, want)
	}
}

// TestInfLimit checks that an unlimited rule sends no headers.
func TestInfLimit(t *testing.T) {
	t.Parallel()
	stack := oneRule(t, newStore(t), algorithms.TokenBucket, core.Inf)
	r := get(t, serve(t, newMiddleware(t, stack)).URL)
	if r.status != 200 || limitHeaders(r.header) != "" {
		t.Errorf("status %d, headers %q; want 200 and none", r.status, limitHeaders(r.header))
	}
	// A decorator may still deny under Inf: a 429 with Retry-After, and no
	// RateLimit-Policy (which would be empty, an invalid List) nor a
	// RateLimit item naming a policy it does not list.
	stack = oneRule(t, answering(core.Decision{RetryAfter: 1500 * time.Millisecond}), algorithms.TokenBucket, core.Inf)
	r = get(t, serve(t, newMiddleware(t, stack)).URL)
	if r.status != 429 || limitHeaders(r.header) != "Retry-After: 2\n" {
		t.Errorf("denied under Inf: %d, headers %q; want 429 and only Retry-After: 2", r.status, limitHeaders(r.header))
	}
	// Beside a limited rule, an Inf rule is left out of RateLimit-Policy
	// and never named by RateLimit, even when it binds (all rules fresh,
	// the Inf rule first).
	stack = newStack(t, newStore(t),
		sluice.Rule{Name: "unlimited", Algorithm: algorithms.TokenBucket, Limit: core.Inf},
		sluice.Rule{Name: "hourly", Algorithm: algorithms.TokenBucket, Limit: core.PerHour(10)})
	r = get(t, serve(t, newMiddleware(t, stack, httplimit.WithCost(func(*http.Request) int64 { return 0 }))).URL)
	if want := "RateLimit-Policy: \"hourly\";q=10;w=3600\nRateLimit: \"hourly\";r=10;t=0\n"; r.status != 200 || limitHeaders(r.header) != want {
		t.Errorf("Inf and hourly: %d, headers\n%s\nwant 200 and\n%s", r.status, limitHeaders(r.header), want)
	}
}

// TestErrorHandlerGetsTheError checks what the error handler is given.
func TestErrorHandlerGetsTheError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		store core.Store
		cost  int64
		want  error
	}{
		{"fail-closed", answering(core.Decision{Source: core.SourceFailClosed}), 1, httplimit.ErrFailClosed},
		{"invalid cost", newStore(t), -1, core.ErrInvalidCost},
		{"closed store", func() core.Store { s := newStore(t); s.Close(); return s }(), 1, core.ErrClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got error
			stack := oneRule(t, tc.store, algorithms.TokenBucket, core.PerSecond(10))
			srv := serve(t, newMiddleware(t, stack,
				httplimit.WithCost(func(*http.Request) int64 { return tc.cost }),
				httplimit.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
					got = err
					w.WriteHeader(http.StatusTeapot)
				})))
			if r := get(t, srv.URL); r.status != http.StatusTeapot {
				t.Errorf("status %d, want the handler's 418", r.status)
			}
			if !errors.Is(got, tc.want) {
				t.Errorf("error handler got %v, want one wrapping %v", got, tc.want)
			}
		})
	}
}

// TestDeniedHandler checks that a custom denied handler gets the denial
// with the headers already set.
func TestDeniedHandler(t *testing.T) {
	t.Parallel()
	stack := oneRule(t, newStore(t), algorithms.TokenBucket, core.PerMinute(1))
	var got httplimit.Denial
	srv := serve(t, newMiddleware(t, stack, httplimit.WithDeniedHandler(func(w http.ResponseWriter, r *http.Request, d httplimit.Denial) {
		got = d
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprintf(w, "slow down (%s)", w.Header().Get("Retry-After"))
	})))
	get(t, srv.URL)
	r := get(t, srv.URL)
	if r.status != 429 || r.body != "slow down (60)" {
		t.Errorf("got %d %q, want 429 \"slow down (60)\"", r.status, r.body)
	}
	if got.Rule != "default" || !slices.Equal(got.Violated, []string{"default"}) || got.RetryAfter != time.Minute || got.Cost != 1 ||
		got.Verdict.Allowed || len(got.Verdict.Rules()) != 1 {
		t.Errorf("denial %+v", got)
	}
}

// TestNoKey checks that a request without a key is answered 400, not let
// through, and that a custom handler can answer otherwise.
func TestNoKey(t *testing.T) {
	t.Parallel()
	stack := oneRule(t, newStore(t), algorithms.TokenBucket, core.PerMinute(1))
	var gotErr error
	srv := serve(t, newMiddleware(t, stack, httplimit.WithKeyFunc(httplimit.HeaderKey("X-API-Key")),
		httplimit.WithNoKeyHandler(func(w http.ResponseWriter, r *http.Request, err error) {
			gotErr = err
			httplimit.WriteNoKey(w, r, err)
		})))
	r := get(t, srv.URL)
	want := `{"type":"about:blank","title":"Bad Request","status":400,"detail":"The request carries nothing to rate-limit it by."}` + "\n"
	if r.status != 400 || r.body != want {
		t.Errorf("no key: %d %q, want 400 %q", r.status, r.body, want)
	}
	if !errors.Is(gotErr, httplimit.ErrNoKey) || !strings.Contains(gotErr.Error(), `rule "default"`) {
		t.Errorf("no-key handler got %v, want ErrNoKey naming the rule", gotErr)
	}
	if r := get(t, srv.URL, "X-API-Key: k1"); r.status != 200 {
		t.Errorf("k1: %d, want 200", r.status)
	}
	if r := get(t, srv.URL, "X-API-Key: k1"); r.status != 429 {
		t.Errorf("k1 again: %d, want 429", r.status)
	}
	if r := get(t, srv.URL, "X-API-Key: k2"); r.status != 200 {
		t.Errorf("k2: %d, want 200", r.status)
	}

	// A key function returning a key too long is a request without a key.
	srv = serve(t, newMiddleware(t, stack, httplimit.WithKeyFunc(func(*http.Request) (string, error) {
		return strings.Repeat("k", core.MaxKeyLen+1), nil
	})))
	if r := get(t, srv.URL); r.status != 400 {
		t.Errorf("over-long key: %d, want 400", r.status)
	}
}

// TestCostByMethod checks per-method costs, including a free method.
func TestCostByMethod(t *testing.T) {
	t.Parallel()
	stack := oneRule(t, newStore(t), algorithms.TokenBucket, core.PerHour(10))
	srv := serve(t, newMiddleware(t, stack, httplimit.WithCost(httplimit.CostByMethod(map[string]int64{"get": 1, "HEAD": 0}, 4))))
	do := func(method string) reply {
		req, _ := http.NewRequest(method, srv.URL, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return reply{status: resp.StatusCode, header: resp.Header}
	}
	for i, s := range []struct {
		method, rl string
		status     int
	}{
		{"GET", `"default";r=9;t=360`, 200},
		{"HEAD", `"default";r=9;t=360`, 200},
		{"POST", `"default";r=5;t=1800`, 200},
		{"POST", `"default";r=1;t=3240`, 200},
		{"POST", `"default";r=1;t=1080`, 429}, // 3 more tokens: 3 × 6 min
		{"GET", `"default";r=0;t=3600`, 200},
	} {
		r := do(s.method)
		if r.status != s.status || r.header.Get("RateLimit") != s.rl {
			t.Errorf("step %d: %s = %d %s, want %d %s", i, s.method, r.status, r.header.Get("RateLimit"), s.status, s.rl)
		}
	}
}

// TestStack checks a stack of three rules on one key, on memstore: every
// rule listed, the binding rule described, every rule that denied named,
// and a denied request charging no rule.
func TestStack(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	stack := newStack(t, s,
		sluice.Rule{Name: "minute", Algorithm: algorithms.FixedWindow, Limit: core.PerMinute(3)},
		sluice.Rule{Name: "hour", Algorithm: algorithms.SlidingWindowLog, Limit: core.PerHour(3)},
		sluice.Rule{Name: "day", Algorithm: algorithms.TokenBucket, Limit: core.PerDay(10)})
	srv := serve(t, newMiddleware(t, stack))
	policyWant := `"minute";q=3;w=60, "hour";q=3;w=3600, "day";q=10;w=86400`
	for i, s := range []struct {
		status   int
		rl, ra   string
		violated []string
	}{
		{200, `"minute";r=2;t=60`, "", nil}, // minute and hour tie at 2/3: the first
		{200, `"minute";r=1;t=60`, "", nil},
		{200, `"minute";r=0;t=60`, "", nil},
		{429, `"hour";r=0;t=3600`, "3600", []string{"minute", "hour"}}, // both deny: the longer wait binds
	} {
		r := get(t, srv.URL)
		if r.status != s.status || r.header.Get("RateLimit") != s.rl || r.header.Get("Retry-After") != s.ra {
			t.Errorf("step %d: %d RateLimit %s Retry-After %q; want %d %s %q", i, r.status, r.header.Get("RateLimit"), r.header.Get("Retry-After"), s.status, s.rl, s.ra)
		}
		if got := r.header.Values("RateLimit-Policy"); !slices.Equal(got, []string{policyWant}) {
			t.Errorf("step %d: RateLimit-Policy %q, want %q", i, got, policyWant)
		}
		if r.status == 429 {
			if got := violated(t, r.body); !slices.Equal(got, s.violated) {
				t.Errorf("step %d: violated-policies %q, want %q", i, got, s.violated)
			}
		}
	}
	// The denial charged no rule: "day" still has 7, so a peek (the
	// decision Allow would make) says 6 would remain.
	v, err := stack.Peek(context.Background(), "ip:127.0.0.1", "ip:127.0.0.1", "ip:127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if d := v.Rules()[2]; d.Remaining != 6 {
		t.Errorf("day: peek says %d would remain, want 6", d.Remaining)
	}
}

// TestKeyPerRule checks that each rule is charged on its own key: a
// per-user rule keyed by an API key, a per-tenant rule keyed by a header,
// a global rule keyed by GlobalKey, and that the default key function
// keys the rules without one, called once a request however many rules
// it keys.
func TestKeyPerRule(t *testing.T) {
	t.Parallel()
	stack := newStack(t, newStore(t),
		sluice.Rule{Name: "user", Algorithm: algorithms.TokenBucket, Limit: core.PerHour(2)},
		sluice.Rule{Name: "tenant", Algorithm: algorithms.TokenBucket, Limit: core.PerHour(3)},
		sluice.Rule{Name: "ip", Algorithm: algorithms.TokenBucket, Limit: core.PerHour(100)},
		sluice.Rule{Name: "ip-daily", Algorithm: algorithms.TokenBucket, Limit: core.PerDay(100)},
		sluice.Rule{Name: "global", Algorithm: algorithms.TokenBucket, Limit: core.PerHour(5)})
	var defaultCalls atomic.Int64
	client, err := httplimit.NewClientIP(httplimit.IPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, newMiddleware(t, stack,
		httplimit.WithKey("user", httplimit.HeaderKey("X-API-Key")),
		httplimit.WithKey("tenant", httplimit.HeaderKey("X-Tenant")),
		httplimit.WithKey("global", httplimit.GlobalKey),
		httplimit.WithKeyFunc(func(r *http.Request) (string, error) {
			defaultCalls.Add(1)
			return client.Key(r)
		})))
	for i, s := range []struct {
		user, tenant string
		status       int
		violated     []string
	}{
		{"alice", "acme", 200, nil},
		{"alice", "acme", 200, nil},
		{"alice", "acme", 429, []string{"user"}},
		{"bob", "acme", 200, nil},
		{"bob", "acme", 429, []string{"tenant"}},
		{"bob", "initech", 200, nil},
		{"carol", "initech", 200, nil},
		{"dave", "globex", 429, []string{"global"}},
		{"alice", "acme", 429, []string{"user", "tenant", "global"}},
	} {
		r := get(t, srv.URL, "X-API-Key: "+s.user, "X-Tenant: "+s.tenant)
		if r.status != s.status {
			t.Errorf("step %d (%s@%s): %d, want %d", i, s.user, s.tenant, r.status, s.status)
		}
		if r.status == 429 {
			if got := violated(t, r.body); !slices.Equal(got, s.violated) {
				t.Errorf("step %d (%s@%s): violated-policies %q, want %q", i, s.user, s.tenant, got, s.violated)
			}
		}
	}
	if n := defaultCalls.Load(); n != 9 {
		t.Errorf("the default key function was called %d times for 9 requests, want 9", n)
	}
	// A request without a tenant has no key for that rule.
	if r := get(t, srv.URL, "X-API-Key: erin"); r.status != 400 {
		t.Errorf("no tenant: %d, want 400", r.status)
	}
}

// TestNewRejectsBadConfig checks that configuration errors are errors.
func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	stack := newStack(t, newStore(t),
		sluice.Rule{Name: "user", Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(1)},
		sluice.Rule{Name: "global", Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(100)})
	for _, tc := range []struct {
		name  string
		stack *sluice.Stack
		opts  []httplimit.Option
	}{
		{"nil stack", nil, nil},
		{"nil option", stack, []httplimit.Option{nil}},
		{"key for a rule the stack lacks", stack, []httplimit.Option{httplimit.WithKey("tenant", httplimit.GlobalKey)}},
		{"key for a rule named in another case", stack, []httplimit.Option{httplimit.WithKey("Global", httplimit.GlobalKey)}},
		{"two keys for one rule", stack, []httplimit.Option{httplimit.WithKey("global", httplimit.GlobalKey), httplimit.WithKey("global", httplimit.GlobalKey)}},
		{"nil key function", stack, []httplimit.Option{httplimit.WithKey("user", nil)}},
		{"IPv6 /0", stack, []httplimit.Option{httplimit.WithIPv6Prefix(0)}},
		{"IPv6 /129", stack, []httplimit.Option{httplimit.WithIPv6Prefix(129)}},
		{"IPv4 /33", stack, []httplimit.Option{httplimit.WithIPv4Prefix(33)}},
		{"IPv4 /-1", stack, []httplimit.Option{httplimit.WithIPv4Prefix(-1)}},
		{"invalid proxy prefix", stack, []httplimit.Option{httplimit.WithTrustedProxies([]netip.Prefix{{}})}},
		{"unknown forwarding header", stack, []httplimit.Option{httplimit.WithForwardedHeader("X-Real-IP")}},
		{"X and X epoch", stack, []httplimit.Option{httplimit.WithHeaders(httplimit.HeadersX | httplimit.HeadersXEpoch)}},
		{"unknown header set", stack, []httplimit.Option{httplimit.WithHeaders(1 << 7)}},
		{"negative jitter", stack, []httplimit.Option{httplimit.WithRetryJitter(-time.Second)}},
		{"nil clock", stack, []httplimit.Option{httplimit.WithNow(nil)}},
	} {
		if _, err := httplimit.New(tc.stack, tc.opts...); !errors.Is(err, httplimit.ErrInvalidOption) {
			t.Errorf("%s: New: %v, want an error wrapping ErrInvalidOption", tc.name, err)
		}
	}
	_, err := httplimit.New(stack, httplimit.WithKey("tenant", httplimit.GlobalKey))
	if want := `the stack has no such rule (its rules: "user", "global")`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("unknown rule: %v, want it to say %s", err, want)
	}
}

// TestSpoofedForwardedFor sends requests from one address with random
// X-Forwarded-For values and no trusted proxy: they all share the remote
// address's bucket, which trips at exactly limit+1.
func TestSpoofedForwardedFor(t *testing.T) {
	t.Parallel()
	const limit = 20
	stack := oneRule(t, newStore(t), algorithms.TokenBucket, core.PerHour(limit))
	srv := serve(t, newMiddleware(t, stack))
	for i := 1; i <= limit+1; i++ {
		spoof := netip.AddrFrom4([4]byte{byte(rand.IntN(223) + 1), byte(rand.IntN(256)), byte(rand.IntN(256)), byte(rand.IntN(256))})
		r := get(t, srv.URL, "X-Forwarded-For: "+spoof.String(), "Forwarded: for="+spoof.String())
		want := http.StatusOK
		if i == limit+1 {
			want = http.StatusTooManyRequests
		}
		if r.status != want {
			t.Fatalf("request %d (X-Forwarded-For %s): %d, want %d", i, spoof, r.status, want)
		}
	}
}

// TestTrustedProxy puts the test client behind trusted proxies (the
// loopback range, and 10.0.0.2 in front of it), with each forwarding
// header: the rightmost untrusted hop is the key, and a victim's address
// put leftmost by an attacker costs the victim nothing.
func TestTrustedProxy(t *testing.T) {
	t.Parallel()
	const victim, attacker = "198.51.100.7", "203.0.113.9"
	for _, tc := range []struct {
		header string
		// attack is what reaches the server for the attacker's request:
		// the attacker's own value naming the victim, then what its proxy
		// (10.0.0.2) appended, then what the next proxy (127.0.0.1, the
		// remote address) appended, on two field lines.
		attack, victim []string
	}{
		{httplimit.HeaderXForwardedFor,
			[]string{"X-Forwarded-For: " + victim + ", " + attacker, "X-Forwarded-For: 10.0.0.2"},
			[]string{"X-Forwarded-For: " + victim + ", 10.0.0.2"}},
		{httplimit.HeaderForwarded,
			[]string{"Forwarded: for=" + victim + ", for=" + attacker, "Forwarded: for=10.0.0.2;proto=http"},
			[]string{"Forwarded: for=" + victim + ", for=10.0.0.2"}},
		// The attacker's unterminated quote does not hide the element its
		// proxy appended.
		{httplimit.HeaderForwarded,
			[]string{`Forwarded: for="` + victim + ", for=" + attacker, "Forwarded: for=10.0.0.2"},
			[]string{"Forwarded: for=" + victim + ", for=10.0.0.2"}},
	} {
		t.Run(tc.header, func(t *testing.T) {
			t.Parallel()
			stack := oneRule(t, newStore(t), algorithms.TokenBucket, core.PerHour(3))
			proxies := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8")}
			srv := serve(t, newMiddleware(t, stack, httplimit.WithTrustedProxies(proxies), httplimit.WithForwardedHeader(tc.header)))
			for i, want := range []int{200, 200, 200, 429, 429} {
				if r := get(t, srv.URL, tc.attack...); r.status != want {
					t.Fatalf("attacker request %d: %d, want %d", i, r.status, want)
				}
			}
			r := get(t, srv.URL, tc.victim...)
			if r.status != 200 || r.header.Get("RateLimit") != `"default";r=2;t=1200` {
				t.Errorf("victim: %d %s, want 200 with the victim's bucket untouched (r=2)", r.status, r.header.Get("RateLimit"))
			}
			// A request from the proxy itself, without the header, is
			// keyed as the proxy.
			if r := get(t, srv.URL); r.status != 200 || r.header.Get("RateLimit") != `"default";r=2;t=1200` {
				t.Errorf("proxy: %d %s", r.status, r.header.Get("RateLimit"))
			}
		})
	}
}

// TestAddressKeys checks, over a real server behind a trusted proxy, that
// IPv4-mapped addresses are unmapped before keying (two IPv4 clients are
// two keys) and that IPv6 clients are keyed by their /64.
func TestAddressKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b string
		same bool
		opts []httplimit.Option
	}{
		{"::ffff:1.2.3.4", "::ffff:5.6.7.8", false, nil},
		{"::ffff:1.2.3.4", "1.2.3.4", true, nil},
		{"2001:db8::1", "2001:db8::2", true, nil},
		{"2001:db8::1", "2001:db8:0:1::1", false, nil},
		{"2001:db8::1", "2001:db8::2", false, []httplimit.Option{httplimit.WithIPv6Prefix(128)}},
		{"2001:db8::1", "2001:db8:0:1::1", true, []httplimit.Option{httplimit.WithIPv6Prefix(48)}},
		{"192.0.2.1", "192.0.2.200", false, nil},
		{"192.0.2.1", "192.0.2.200", true, []httplimit.Option{httplimit.WithIPv4Prefix(24)}},
	} {
		stack := oneRule(t, newStore(t), algorithms.TokenBucket, core.PerHour(1))
		opts := append([]httplimit.Option{httplimit.WithTrustedProxies([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")})}, tc.opts...)
		srv := serve(t, newMiddleware(t, stack, opts...))
		if r := get(t, srv.URL, "X-Forwarded-For: "+tc.a); r.status != 200 {
			t.Errorf("%s: %d, want 200", tc.a, r.status)
		}
		want := 200
		if tc.same {
			want = 429
		}
		if r := get(t, srv.URL, "X-Forwarded-For: "+tc.b); r.status != want {
			t.Errorf("%s after %s (%d options): %d, want %d", tc.b, tc.a, len(tc.opts), r.status, want)
		}
	}
}

// TestWireBytes reads a 429 off the connection, to check the header lines
// byte for byte as they are sent (names in Go's canonical case, which HTTP
// treats as the same names).
func TestWireBytes(t *testing.T) {
	t.Parallel()
	stack := newStack(t, newStore(t),
		sluice.Rule{Name: "per-ip.v2", Algorithm: algorithms.TokenBucket, Limit: core.PerHour(1)},
		sluice.Rule{Name: "global_all", Algorithm: algorithms.TokenBucket, Limit: core.PerHour(10)})
	srv := serve(t, newMiddleware(t, stack, httplimit.WithKey("global_all", httplimit.GlobalKey)))
	for i, want := range []string{"HTTP/1.1 200 OK\r\n", "HTTP/1.1 429 Too Many Requests\r\n"} {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		raw, err := io.ReadAll(conn)
		conn.Close()
		if err != nil {
			t.Fatal(err)
		}
		s := string(raw)
		lines := []string{want, "Ratelimit: \"per-ip.v2\";r=0;t=3600\r\n", "Ratelimit-Policy: \"per-ip.v2\";q=1;w=3600, \"global_all\";q=10;w=3600\r\n"}
		if i == 1 {
			lines = append(lines, "Retry-After: 3600\r\n", "Content-Type: application/problem+json\r\n")
		}
		for _, l := range lines {
			if !strings.Contains(s, l) {
				t.Errorf("request %d: response lacks %q:\n%s", i, l, s)
			}
		}
	}
}
