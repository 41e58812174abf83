package httplimit_test

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/contrib/httplimit"
)

// TestConcurrencyRule checks a stack with a concurrency rule (one request
// in the handler at a time) and an hourly rule: the slot is held while
// the handler runs, so a second request meanwhile is denied (and charges
// the hourly rule nothing); it is released when the handler returns, and
// when it panics, the panic going on up to the server.
func TestConcurrencyRule(t *testing.T) {
	t.Parallel()
	stack := newStack(t, newStore(t), // the clock is stuck: a slot never expires, only a release frees it
		sluice.Rule{Name: "inflight", Algorithm: algorithms.Concurrency, Limit: sluice.Per(1, time.Minute)},
		sluice.Rule{Name: "hourly", Algorithm: algorithms.TokenBucket, Limit: sluice.PerHour(100)})
	m := newMiddleware(t, stack)
	entered, leave := make(chan struct{}), make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	mux.HandleFunc("/block", func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-leave
		io.WriteString(w, "ok")
	})
	mux.HandleFunc("/panic", func(w http.ResponseWriter, r *http.Request) { panic("boom") })
	// recovered receives what the middleware let through of a panic.
	recovered := make(chan any, 1)
	outer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				recovered <- p
				w.WriteHeader(http.StatusInternalServerError)
			}
		}()
		m.Handler(mux).ServeHTTP(w, r)
	})
	srv := httptest.NewUnstartedServer(outer)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)

	const policyH = `"inflight";q=1;w=60, "hourly";q=100;w=3600`
	check := func(step string, r reply, status int, rl string) {
		t.Helper()
		if r.status != status || r.header.Get("RateLimit") != rl || r.header.Get("RateLimit-Policy") != policyH {
			t.Errorf("%s: %d RateLimit %s RateLimit-Policy %s; want %d %s %s", step, r.status, r.header.Get("RateLimit"), r.header.Get("RateLimit-Policy"), status, rl, policyH)
		}
	}
	held := make(chan reply, 1)
	go func() {
		r, err := tryGet(srv.URL + "/block")
		if err != nil {
			t.Error(err)
		}
		held <- r
	}()
	<-entered
	r := get(t, srv.URL)
	check("while /block is in the handler", r, 429, `"inflight";r=0;t=60`)
	if got := violated(t, r.body); !slices.Equal(got, []string{"inflight"}) {
		t.Errorf("violated-policies %q, want [inflight]", got)
	}
	close(leave)
	check("/block", <-held, 200, `"inflight";r=0;t=60`) // its headers were set on the way in
	check("after /block returned", get(t, srv.URL), 200, `"inflight";r=0;t=60`)

	if r := get(t, srv.URL+"/panic"); r.status != http.StatusInternalServerError {
		t.Errorf("/panic: %d, want the outer handler's 500", r.status)
	}
	select {
	case p := <-recovered:
		if p != "boom" {
			t.Errorf("the panic reached the outer handler as %v, want boom", p)
		}
	default:
		t.Error("the handler's panic did not reach the outer handler")
	}
	check("after /panic", get(t, srv.URL), 200, `"inflight";r=0;t=60`)

	// Four requests were served, each charged to the hourly rule once;
	// the denied one was not. A peek says what one more would leave.
	v, err := stack.Peek(context.Background(), "ip:127.0.0.1", "ip:127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if got := v.Rules()[1].Remaining; got != 95 {
		t.Errorf("hourly: peek says %d would remain, want 95 (100 less 4 served, less one more)", got)
	}
	if d := v.Rules()[0]; !d.Allowed || d.Remaining != 0 {
		t.Errorf("inflight: peek %+v, want the slot free (allowed, none left after one more)", d)
	}
}

// TestConcurrencyRuleStoreError checks that a stack with a concurrency
// rule whose store fails answers 503, like any other.
func TestConcurrencyRuleStoreError(t *testing.T) {
	t.Parallel()
	stack := newStack(t, failing, sluice.Rule{Name: "inflight", Algorithm: algorithms.Concurrency, Limit: sluice.Per(1, time.Minute)})
	if r := get(t, serve(t, newMiddleware(t, stack, httplimit.WithKey("inflight", httplimit.GlobalKey))).URL); r.status != 503 {
		t.Errorf("store error: %d, want 503", r.status)
	}
}
