package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/memstore"
)

// TestServer runs the example's handler on a real server with limits of
// one request an hour per user and three for everyone, on each store: a
// 200, then a 429, while two other users still pass (the denied request
// cost the global rule nothing), then the global rule denies. The memstore's clock is stuck; the Redis server is
// a real one of the test's own (its clock runs, which hour-long limits do
// not notice).
func TestServer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		newStore func(t *testing.T) core.Store
	}{
		{"memstore", func(t *testing.T) core.Store {
			stuck := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			store, err := memstore.New(memstore.Config{SweepInterval: -1, Now: func() time.Time { return stuck }})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { store.Close() })
			return store
		}},
		{"redis", func(t *testing.T) core.Store {
			store, where, closeStore, err := newStore(redistest.Start(t).Addr())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { closeStore() })
			if !strings.HasPrefix(where, "redis ") {
				t.Errorf("newStore(addr) keeps limits in %q, want redis", where)
			}
			return store
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h, err := newHandler(tc.newStore(t), limits{perUser: core.PerHour(1), daily: core.PerDay(100), global: core.PerHour(3)}, nil)
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(h)
			defer srv.Close()

			for i, want := range []struct {
				apiKey     string
				status     int
				ratelimit  string
				retryAfter string
				body       string
			}{
				{"", 200, `"per-user";r=0;t=3600`, "", "hello from sluice\n"},
				{"", 429, `"per-user";r=0;t=3600`, "3600", `"violated-policies":["per-user"]`},
				{"alice", 200, `"per-user";r=0;t=3600`, "", "hello from sluice\n"},
				// bob's per-user rule and the global one are both spent
				// (0 left): the first binds.
				{"bob", 200, `"per-user";r=0;t=3600`, "", "hello from sluice\n"},
				// The global rule earns a request back every 1200 s.
				{"carol", 429, `"global";r=0;t=1200`, "1200", `"violated-policies":["global"]`},
			} {
				req, err := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
				if err != nil {
					t.Fatal(err)
				}
				if want.apiKey != "" {
					req.Header.Set("X-API-Key", want.apiKey)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != want.status || resp.Header.Get("RateLimit") != want.ratelimit || !strings.Contains(string(body), want.body) {
					t.Errorf("request %d: %d %s %q; want %d %s %q", i, resp.StatusCode, resp.Header.Get("RateLimit"), body, want.status, want.ratelimit, want.body)
				}
				if got := resp.Header.Get("RateLimit-Policy"); got != `"per-user";q=1;w=3600, "daily";q=100;w=86400, "global";q=3;w=3600` {
					t.Errorf("request %d: RateLimit-Policy %s", i, got)
				}
				if resp.StatusCode == 429 {
					var p map[string]any
					if err := json.Unmarshal(body, &p); err != nil || resp.Header.Get("Content-Type") != "application/problem+json" || resp.Header.Get("Retry-After") != want.retryAfter {
						t.Errorf("429: %v %s Retry-After %q", err, resp.Header.Get("Content-Type"), resp.Header.Get("Retry-After"))
					}
				}
			}
		})
	}
}

// TestStoreDown checks the example against a Redis address where nothing
// listens: it starts, and answers 503, not 500 and not 429.
func TestStoreDown(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	store, _, closeStore, err := newStore(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	h, err := newHandler(store, defaultLimits, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("Redis down: %d %s, want 503 application/problem+json", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

func TestParsePrefixes(t *testing.T) {
	t.Parallel()
	got, err := parsePrefixes(" 10.0.0.0/8, ,2001:db8::/32")
	if err != nil || len(got) != 2 || got[1] != netip.MustParsePrefix("2001:db8::/32") {
		t.Errorf("parsePrefixes = %v, %v", got, err)
	}
	if _, err := parsePrefixes("10.0.0.1"); err == nil {
		t.Error("an address without a length parsed as a prefix")
	}
}

func TestPrintUsage(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	printUsage(&b, "http://127.0.0.1:8080", "memstore")
	for _, want := range []string{"curl -i http://127.0.0.1:8080/", "%{http_code}", "1 req/s (burst 5)", "50 req/s (burst 100)", "limits in memstore"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, b.String())
		}
	}
}
