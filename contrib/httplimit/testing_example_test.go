package httplimit_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/contrib/httplimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/stores/memstore"
	"github.com/sluicehq/sluice/stores/storetest"
)

// hello is the handler the testing examples limit.
var hello = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello\n") })

// limited returns hello behind a middleware of one rule, per client, on
// store.
func limited(store core.Store, limit core.Limit) http.Handler {
	stack, err := core.NewStack(store, core.Rule{Name: "per-client", Algorithm: algorithms.TokenBucket, Limit: limit})
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
	h := limited(store, core.PerHour(2))
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
		h := limited(breaker, core.PerHour(2))

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
	h := limited(store, core.PerMinute(1))
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
