package serve

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestHealthcheck answers /healthcheck as envoyproxy/ratelimit: 200 "OK"
// while healthy, 500 with no body otherwise: while the store is found
// down, if Config.StoreHealthy says so; while no domain is loaded, with
// Config.HealthyWithConfig; and once the server is stopping.
func TestHealthcheck(t *testing.T) {
	t.Parallel()
	var storeUp atomic.Bool
	storeUp.Store(true)
	dir := t.TempDir()
	h := start(t, api, nil, func(c *Config) {
		c.Limits = dir // empty: no domain
		c.APIAddr = "127.0.0.1:0"
		c.HealthyWithConfig = true
		c.StoreHealthy = storeUp.Load
	})
	check := func(step string, wantCode int, wantBody string) {
		t.Helper()
		resp, err := http.Get("http://" + h.srv.APIAddr() + "/healthcheck")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != wantCode || string(body) != wantBody {
			t.Errorf("%s: /healthcheck = %d %q, want %d %q", step, resp.StatusCode, body, wantCode, wantBody)
		}
	}
	grpcHealth := func(step string, want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		resp, err := healthpb.NewHealthClient(h.conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
		if err != nil || resp.Status != want {
			t.Errorf("%s: gRPC health of \"ratelimit\" = %v, %v; want %v", step, resp, err, want)
		}
	}
	check("no domain", 500, "")
	grpcHealth("no domain", healthpb.HealthCheckResponse_NOT_SERVING)
	writeConfig(t, filepath.Join(dir, "api"), api)
	if err := h.srv.Reload(); err != nil {
		t.Fatal(err)
	}
	check("a domain", 200, "OK")
	grpcHealth("a domain", healthpb.HealthCheckResponse_SERVING)
	storeUp.Store(false)
	check("the store down", 500, "")
	storeUp.Store(true)
	check("the store back", 200, "OK")
	h.stop()
	if h.srv.Healthy() {
		t.Error("stopped: Healthy() = true")
	}
}

// TestJSON answers /json as envoyproxy/ratelimit: the response as JSON,
// 200 while under the limit, 429 over it, 400 for a body that is not a
// request or a request the service refuses.
func TestJSON(t *testing.T) {
	t.Parallel()
	h := start(t, `
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
`, nil, func(c *Config) { c.APIAddr = "127.0.0.1:0" })
	post := func(body string) (int, string) {
		t.Helper()
		resp, err := http.Post("http://"+h.srv.APIAddr()+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	req := `{"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "alice"}]}]}`
	for i, want := range []struct {
		code int
		body string
	}{
		{200, `"overallCode":"OK"`},
		{429, `"overallCode":"OVER_LIMIT"`},
	} {
		code, body := post(req)
		if code != want.code || !strings.Contains(strings.ReplaceAll(body, " ", ""), want.body) || !strings.Contains(body, `"requestsPerUnit":1`) {
			t.Errorf("request %d: /json = %d %s, want %d with %s", i+1, code, body, want.code, want.body)
		}
	}
	for _, bad := range []string{"", "{", `{"domain": 7}`, `{"descriptors": [{"entries": [{"key": "user"}]}]}`} {
		if code, _ := post(bad); code != 400 {
			t.Errorf("/json %q = %d, want 400", bad, code)
		}
	}
}
