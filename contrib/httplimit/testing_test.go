package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/contrib/httplimit"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/memstore"
	"github.com/sluicehq/sluice/stores/redisstore"
)

// TestSynctestRetryAfter tests a handler behind the middleware in a
// testing/synctest bubble: the second request is denied with a
// Retry-After of an hour, the test sleeps it, on the bubble's clock, and
// the next request passes. The hour takes no real time. Everything is
// made inside the bubble, and the store is closed in it.
func TestSynctestRetryAfter(t *testing.T) {
	t.Parallel()
	began := time.Now()
	synctest.Test(t, func(t *testing.T) {
		store, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() }) // runs inside the bubble
		stack, err := sluice.NewStack(store, sluice.Rule{Name: "per-client", Algorithm: algorithms.TokenBucket, Limit: sluice.PerHour(1)})
		if err != nil {
			t.Fatal(err)
		}
		mw, err := httplimit.New(stack)
		if err != nil {
			t.Fatal(err)
		}
		h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		get := func() *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
			return rec
		}

		if rec := get(); rec.Code != http.StatusOK {
			t.Fatalf("first request: %d, want 200", rec.Code)
		}
		rec := get()
		if rec.Code != http.StatusTooManyRequests {
			t.Fatalf("second request: %d, want 429", rec.Code)
		}
		secs, err := strconv.Atoi(rec.Header().Get("Retry-After"))
		if err != nil || secs != 3600 {
			t.Fatalf("Retry-After %q, want 3600", rec.Header().Get("Retry-After"))
		}
		time.Sleep(time.Duration(secs)*time.Second - time.Millisecond)
		if rec := get(); rec.Code != http.StatusTooManyRequests {
			t.Fatalf("a millisecond before Retry-After: %d, want 429", rec.Code)
		}
		time.Sleep(time.Millisecond)
		if rec := get(); rec.Code != http.StatusOK {
			t.Fatalf("after Retry-After: %d, want 200", rec.Code)
		}
	})
	if real := time.Since(began); real > time.Minute {
		t.Errorf("an hour in the bubble took %v of real time", real)
	}
}

// TestSynctestQueue checks that a shaping middleware's waits keep a
// testing/synctest bubble's time: nginx's limit_req rate=10r/s burst=2
// serves three requests arriving together 0, 100 and 200 ms later, and
// refuses the fourth at once.
func TestSynctestQueue(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		stack, err := sluice.NewStack(store, sluice.Rule{Name: "api", Algorithm: algorithms.GCRA, Limit: sluice.PerSecond(10).WithBurst(1)})
		if err != nil {
			t.Fatal(err)
		}
		mw, err := httplimit.New(stack, httplimit.WithQueue(2), httplimit.WithKey("api", httplimit.GlobalKey))
		if err != nil {
			t.Fatal(err)
		}
		h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		start := time.Now()
		type answer struct {
			code int
			took time.Duration
		}
		answers := make([]answer, 4)
		var wg sync.WaitGroup
		for i := range answers {
			wg.Go(func() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
				answers[i] = answer{rec.Code, time.Since(start)}
			})
			synctest.Wait() // in order: each request reserves before the next arrives
		}
		wg.Wait()
		want := []answer{{200, 0}, {200, 100 * time.Millisecond}, {200, 200 * time.Millisecond}, {429, 0}}
		for i := range want {
			if answers[i] != want[i] {
				t.Errorf("request %d: %d after %v, want %d after %v", i+1, answers[i].code, answers[i].took, want[i].code, want[i].took)
			}
		}
	})
}

// TestRedisHandler tests a handler behind the middleware on a real
// redis-server that the test starts (and stops, by its PID): the limit
// holds on Redis's clock, and when the server dies, a fail-closed breaker
// answers 503 rather than 429 or 500. A bubble cannot hold this test:
// Redis keeps its own time.
func TestRedisHandler(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	// One dial attempt: once the server is killed, a call fails at once.
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialerRetries: 1})
	t.Cleanup(func() { client.Close() })
	store, err := redisstore.New(client, redisstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// A generous per-call deadline: a loaded test machine must not trip
	// the circuit while Redis is up.
	breaker, err := policy.NewBreaker(store, policy.WithMode(policy.FailClosed), policy.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { breaker.Close() }) // closes the store too
	stack, err := sluice.NewStack(breaker, sluice.Rule{Name: "per-client", Algorithm: algorithms.TokenBucket, Limit: sluice.PerHour(2)})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httplimit.New(stack)
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	get := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		return rec
	}

	for i, want := range []int{200, 200, 429} {
		if rec := get(); rec.Code != want {
			t.Fatalf("request %d: %d, want %d", i+1, rec.Code, want)
		}
	}
	if n, err := srv.Do("DBSIZE"); err != nil {
		t.Fatal(err)
	} else if keys, _ := n.Int(); keys != 1 {
		t.Errorf("Redis holds %d keys, want the client's one", keys)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if rec := get(); rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "" {
		t.Errorf("with Redis killed: %d, Retry-After %q; want 503 without Retry-After", rec.Code, rec.Header().Get("Retry-After"))
	}
}

// TestHandlerAtInstants is docs/testing.md's worked example: one test of
// a handler behind the middleware, run over the in-memory store and over
// a real Redis that the test starts, with no sleeps. httplimit.WithNow
// decides each request at the instant the test's clock says, which every
// store honours, Redis included (its own clock is not read): the test
// steps the clock and asserts what the handler answers at exact instants.
func TestHandlerAtInstants(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	stores := []struct {
		name string
		open func(t *testing.T) sluice.Store
	}{
		{"memstore", func(t *testing.T) sluice.Store {
			store, err := memstore.New(memstore.Config{})
			if err != nil {
				t.Fatal(err)
			}
			return store
		}},
		{"redis", func(t *testing.T) sluice.Store {
			client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			t.Cleanup(func() { client.Close() })
			store, err := redisstore.New(client, redisstore.Config{})
			if err != nil {
				t.Fatal(err)
			}
			return store
		}},
	}
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			store := s.open(t)
			t.Cleanup(func() { store.Close() })
			// Two requests a minute per client: one more every 30 s.
			stack, err := sluice.NewStack(store, sluice.Rule{Name: "per-client", Algorithm: algorithms.TokenBucket, Limit: sluice.PerMinute(2)})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			now := start
			mw, err := httplimit.New(stack, httplimit.WithNow(func() time.Time { return now }))
			if err != nil {
				t.Fatal(err)
			}
			h := mw.Handler(hello) // the handler under test

			for i, step := range []struct {
				at         time.Duration // from start
				code       int
				retryAfter string
			}{
				{0, http.StatusOK, ""},
				{0, http.StatusOK, ""},
				{0, http.StatusTooManyRequests, "30"},
				{30*time.Second - time.Microsecond, http.StatusTooManyRequests, "1"},
				{30 * time.Second, http.StatusOK, ""},
				{30 * time.Second, http.StatusTooManyRequests, "30"},
				{time.Hour, http.StatusOK, ""},
			} {
				now = start.Add(step.at)
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
				if got := rec.Header().Get("Retry-After"); rec.Code != step.code || got != step.retryAfter {
					t.Errorf("step %d: GET at %v = %d, Retry-After %q; want %d, %q", i, step.at, rec.Code, got, step.code, step.retryAfter)
				}
			}
		})
	}
}
