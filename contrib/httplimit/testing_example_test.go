package httplimit_test

import (
	"fmt"
	"io"
	"log"
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
	"github.com/sluicehq/sluice/stores/storetest"
)

// hello is the handler the testing examples limit.
var hello = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello\n") })

// limited returns hello behind a middleware of one rule, per client, on
// store.
func limited(store sluice.Store, limit sluice.Limit) http.Handler {
	stack, err := sluice.NewStack(store, sluice.Rule{Name: "per-client", Algorithm: algorithms.TokenBucket, Limit: limit})
	if err != nil {
		log.Fatal(err)
	}
	mw, err := httplimit.New(stack)
	if err != nil {
		log.Fatal(err)
	}
	return mw.Handler(hello)
}

// Testing a handler behind the middleware needs no server and no Redis:
// a memstore holds the limits, and httptest's recorder takes the answers.
// httptest.NewRequest comes from 192.0.2.1, which keys the rule.
func Example_testing() {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	h := limited(store, sluice.PerHour(2))
	for range 3 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		fmt.Printf("%d, Retry-After %q\n", rec.Code, rec.Header().Get("Retry-After"))
	}
	// Another client has a budget of its own.
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "198.51.100.7:4321"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	fmt.Println(rec.Code)
	// Output:
	// 200, Retry-After ""
	// 200, Retry-After ""
	// 429, Retry-After "1800"
	// 200
}

// Testing what the handler answers while the store is down: a
// storetest.Faulty makes the store fail with storetest.ErrOutage, which
// a breaker counts as an outage and answers by its mode. Fail-open serves
// the request (without rate-limit headers: no limit is known), fail-closed
// answers 503, never 429: no client was over its limit.
func Example_testingOutage() {
	for _, mode := range []policy.Mode{policy.FailOpen, policy.FailClosed} {
		mem, err := memstore.New(memstore.Config{})
		if err != nil {
			log.Fatal(err)
		}
		faulty := storetest.NewFaulty(mem)
		breaker, err := policy.NewBreaker(faulty, policy.WithMode(mode))
		if err != nil {
			log.Fatal(err)
		}
		h := limited(breaker, sluice.PerHour(2))

		faulty.Fail(storetest.ErrOutage)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		fmt.Printf("%v: %d %q, RateLimit %q\n", mode, rec.Code, rec.Body.String(), rec.Header().Get("RateLimit"))
		breaker.Close() // closes faulty and the memstore
	}
	// Output:
	// fail-open: 200 "hello\n", RateLimit ""
	// fail-closed: 503 "{\"type\":\"about:blank\",\"title\":\"Service Unavailable\",\"status\":503,\"detail\":\"The rate limiter cannot decide now: its store is unavailable.\"}\n", RateLimit ""
}

// Testing what happens once Retry-After has passed, on a clock the test
// moves by hand: memstore.Config.Now. (In a testing/synctest bubble a
// time.Sleep does the same with the default clock; see docs/testing.md.)
func Example_testingClock() {
	var mu sync.Mutex
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }

	store, err := memstore.New(memstore.Config{Now: clock})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	h := limited(store, sluice.PerMinute(1))
	get := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		return rec
	}
	fmt.Println(get().Code)
	denied := get()
	fmt.Println(denied.Code, "Retry-After:", denied.Header().Get("Retry-After"))
	advance(time.Minute)
	fmt.Println(get().Code)
	// Output:
	// 200
	// 429 Retry-After: 60
	// 200
}

// Testing a handler on a real Redis, over HTTP: redistest.Start runs a
// redis-server of the test's own on a free port and stops it, by its
// PID, when the test ends, and httptest.NewServer serves the handler on
// another. redistest.Start needs the test's *testing.T, which an Example
// has not: this one compiles but does not run (it has no Output line).
// Keep such a test out of a testing/synctest bubble: Redis decides on its
// own clock.
func Example_testingRedis() {
	var t *testing.T // the test's *testing.T
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer client.Close()
	store, err := redisstore.New(client, redisstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close() // it leaves the client open
	ts := httptest.NewServer(limited(store, sluice.PerHour(1)))
	defer ts.Close()

	for i, want := range []struct {
		code       int
		retryAfter string
	}{
		{http.StatusOK, ""},
		{http.StatusTooManyRequests, "3600"}, // an hour, in whole seconds
	} {
		resp, err := ts.Client().Get(ts.URL)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if got := resp.Header.Get("Retry-After"); resp.StatusCode != want.code || got != want.retryAfter {
			t.Fatalf("request %d: %d, Retry-After %q; want %d, %q", i+1, resp.StatusCode, got, want.code, want.retryAfter)
		}
	}
}

// Testing what happens once Retry-After has passed, with the default
// clocks: in a testing/synctest bubble, time.Sleep waits on a fake clock
// that jumps to the next timer as soon as every goroutine of the bubble
// is blocked, so the hour below takes no real time. Make the store in
// the bubble and close it there, and call the handler with a recorder:
// a goroutine reading a socket would keep the clock from moving.
// synctest.Test needs the test's *testing.T, which an Example has not:
// this one compiles but does not run (it has no Output line).
func Example_testingSynctest() {
	var t *testing.T // the test's *testing.T
	synctest.Test(t, func(t *testing.T) {
		store, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close() // stops the sweeper, which the bubble waits for
		h := limited(store, sluice.PerHour(1))
		get := func() *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
			return rec
		}

		if rec := get(); rec.Code != http.StatusOK {
			t.Fatalf("first request: %d, want 200", rec.Code)
		}
		denied := get()
		secs, err := strconv.Atoi(denied.Header().Get("Retry-After"))
		if denied.Code != http.StatusTooManyRequests || err != nil {
			t.Fatalf("second request: %d, Retry-After %q; want 429 and a number of seconds", denied.Code, denied.Header().Get("Retry-After"))
		}
		time.Sleep(time.Duration(secs) * time.Second) // an hour, at once
		if rec := get(); rec.Code != http.StatusOK {
			t.Fatalf("after Retry-After: %d, want 200", rec.Code)
		}
	})
}
