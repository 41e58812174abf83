package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/serve"
)

// startEnv runs sluice-serve in process with no flags at all, configured
// by environ alone, as a Deployment written for envoyproxy/ratelimit runs
// it, and returns the server, a client and its log.
func startEnv(t *testing.T, environ []string) (*serve.Server, rlsv3.RateLimitServiceClient, *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stderr := &syncBuffer{}
	ready := make(chan *serve.Server, 1)
	exited := make(chan int, 1)
	go func() {
		exited <- runServe(ctx, nil, environ, io.Discard, stderr, nil, func(s *serve.Server) { ready <- s })
	}()
	var srv *serve.Server
	select {
	case srv = <-ready:
	case code := <-exited:
		cancel()
		t.Fatalf("sluice-serve exited %d: %s", code, stderr.String())
	}
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		if code := <-exited; code != 0 {
			t.Errorf("sluice-serve exited %d: %s", code, stderr.String())
		}
	})
	return srv, rlsv3.NewRateLimitServiceClient(conn), stderr
}

// peerEnv is the environment of a peer deployment on ports of the
// test's own, with extra variables after.
func peerEnv(runtime string, extra ...string) []string {
	return append([]string{
		"HOST=127.0.0.1", "PORT=0",
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=0",
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0",
		"RUNTIME_ROOT=" + runtime,
		"RUNTIME_SUBDIRECTORY=ratelimit",
		"USE_STATSD=false",
		"LOG_LEVEL=warn",
	}, extra...)
}

// limitOf asks for one descriptor and returns its status; nil if no limit
// applies.
func limitOf(t *testing.T, c rlsv3.RateLimitServiceClient, domain, key, value string) *rlsv3.RateLimitResponse_DescriptorStatus {
	t.Helper()
	resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: value}}}}})
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s, %s=%s): %v", domain, key, value, err)
	}
	return resp.Statuses[0]
}

// healthcheck returns /healthcheck's status and body on the API port.
func healthcheck(t *testing.T, srv *serve.Server) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + srv.APIAddr() + "/healthcheck")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestServePeerEnvironment starts sluice-serve as a Deployment written for
// envoyproxy/ratelimit starts it: no flags, the peer's variables, and a
// runtime directory behind a link whose files are named c.conf, d and
// .dot, with a key repeated. Every file of the application directory is
// in force, the dot file too (RUNTIME_IGNOREDOTFILES is false by
// default), and nothing outside it; each setting sluice does not honour is
// named in a warning, and so is the repeated key; /healthcheck answers as
// the peer's.
func TestServePeerEnvironment(t *testing.T) {
	rdb := redistest.Shared(t)
	base := t.TempDir()
	files := map[string]string{
		"v1/ratelimit/config/a.yaml": "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
		"v1/ratelimit/config/c.conf": "domain: c\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 3}\n",
		"v1/ratelimit/config/d":      "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 4}\n    rate_limit: {unit: day, requests_per_unit: 1000001}\n",
		"v1/ratelimit/config/.dot":   "domain: dot\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 4294967295}\n",
		"v1/ratelimit/other.yaml":    "domain: other\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
	}
	for name, data := range files {
		p := filepath.Join(base, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	current := filepath.Join(base, "current")
	if err := os.Symlink(filepath.Join(base, "v1"), current); err != nil {
		t.Fatal(err)
	}
	srv, c, log := startEnv(t, peerEnv(current,
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+rdb.Addr(), "CACHE_KEY_PREFIX=env-test:",
		"USE_STATSD=true", "STATSD_HOST=statsd", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false",
		"REDIS_PERSECOND_URL=other:6379", "LIMIT_RESPONSE_HEADERS_ENABLED=true",
		"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true"))

	for _, tt := range []struct {
		domain string
		want   uint32
		unit   rlsv3.RateLimitResponse_RateLimit_Unit
	}{
		{"a", 1, rlsv3.RateLimitResponse_RateLimit_MINUTE},
		{"c", 3, rlsv3.RateLimitResponse_RateLimit_HOUR},
		{"d", 1000001, rlsv3.RateLimitResponse_RateLimit_DAY},
		{"dot", 4294967295, rlsv3.RateLimitResponse_RateLimit_SECOND},
	} {
		st := limitOf(t, c, tt.domain, "k", "v")
		if st.CurrentLimit.GetRequestsPerUnit() != tt.want || st.CurrentLimit.GetUnit() != tt.unit || st.Code != rlsv3.RateLimitResponse_OK {
			t.Errorf("domain %s: status %v, want OK under %d per %v", tt.domain, st, tt.want, tt.unit)
		}
	}
	if st := limitOf(t, c, "other", "k", "v"); st.CurrentLimit != nil {
		t.Errorf("domain other, outside the application directory: limited %v", st.CurrentLimit)
	}
	if st := limitOf(t, c, "a", "k", "v"); st.Code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("the second request of 1 a minute: %v, want OVER_LIMIT", st.Code)
	}
	if code, body := healthcheck(t, srv); code != http.StatusOK || body != "OK" {
		t.Errorf("/healthcheck = %d %q, want 200 \"OK\"", code, body)
	}
	out := log.String()
	for _, want := range []string{
		"USE_STATSD: not honoured",
		"STATSD_HOST: not honoured",
		"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: not honoured",
		"REDIS_PERSECOND_URL: not honoured",
		`limits: descriptor \"k\": key \"rate_limit\" repeats the one at line 4; the last wins`,
		"file=" + filepath.Join(current, "ratelimit/config/d") + " line=5",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %q:\n%s", want, out)
		}
	}
	for _, quiet := range []string{"limits loaded", "serving", "CACHE_KEY_PREFIX", "LIMIT_RESPONSE_HEADERS_ENABLED", "HEALTHY_WITH"} {
		if strings.Contains(out, quiet) {
			t.Errorf("the log at LOG_LEVEL=warn holds %q:\n%s", quiet, out)
		}
	}
}

// With RUNTIME_IGNOREDOTFILES the dot file is not read; with
// RUNTIME_WATCH_ROOT=false the application directory is read whole.
func TestServePeerRuntimeOptions(t *testing.T) {
	base := t.TempDir()
	for name, data := range map[string]string{
		"ratelimit/config/sub/a": "domain: a\n",
		"ratelimit/config/.dot":  "domain: dot\n",
		"ratelimit/config.yaml":  "domain: s\n",
		"ratelimit/configs.yaml": "domain: not\n",
	} {
		p := filepath.Join(base, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		env  []string
		want string
	}{
		{nil, "a dot s"},
		{[]string{"RUNTIME_IGNOREDOTFILES=true"}, "a s"},
		{[]string{"RUNTIME_WATCH_ROOT=false"}, "a dot"},
		{[]string{"RUNTIME_WATCH_ROOT=false", "RUNTIME_IGNOREDOTFILES=true"}, "a"},
	} {
		srv, _, _ := startEnv(t, peerEnv(base, append([]string{"BACKEND_TYPE=memory"}, tt.env...)...))
		if got := strings.Join(srv.Service().Limits().Domains(), " "); got != tt.want {
			t.Errorf("%q: domains %q, want %q", tt.env, got, tt.want)
		}
	}
}

// A configuration directory that declares no domain fails /healthcheck
// with HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED, until one does; without
// it, /healthcheck passes. Redis being down does not fail it, unless
// REDIS_HEALTH_CHECK_ACTIVE_CONNECTION says so.
func TestServePeerHealthcheck(t *testing.T) {
	base := t.TempDir()
	if err := os.MkdirAll(filepath.Join(base, "ratelimit/config"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Redis is down: nothing listens on the socket.
	down := []string{"REDIS_URL=" + filepath.Join(base, "no.sock")}
	srv, _, _ := startEnv(t, peerEnv(base, append(down, "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true")...))
	if code, _ := healthcheck(t, srv); code != http.StatusInternalServerError {
		t.Errorf("no domain, HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: /healthcheck = %d, want 500", code)
	}
	if err := os.WriteFile(filepath.Join(base, "ratelimit/config/a"), []byte("domain: a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := srv.Reload(); err != nil {
		t.Fatal(err)
	}
	if code, body := healthcheck(t, srv); code != http.StatusOK || body != "OK" {
		t.Errorf("a domain loaded, Redis down: /healthcheck = %d %q, want 200 \"OK\"", code, body)
	}
	empty := t.TempDir()
	if err := os.MkdirAll(filepath.Join(empty, "ratelimit/config"), 0o755); err != nil {
		t.Fatal(err)
	}
	srv2, _, _ := startEnv(t, peerEnv(empty, down...))
	if code, _ := healthcheck(t, srv2); code != http.StatusOK {
		t.Errorf("no domain, Redis down: /healthcheck = %d, want 200", code)
	}
}

// Variables with bad values, and settings sluice refuses to pretend, stop
// it with the variable's name.
func TestServePeerEnvironmentErrors(t *testing.T) {
	for _, tt := range []struct {
		env  string
		want string
	}{
		{"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_TYPE=GRPC_XDS_SOTW: sluice reads its configuration from files only"},
		{"BACKEND_TYPE=memcache", "BACKEND_TYPE=memcache"},
		{"GRPC_SERVER_USE_TLS=true", "needs -grpc-tls-cert and -grpc-tls-key (GRPC_SERVER_TLS_CERT, GRPC_SERVER_TLS_KEY)"},
		{"GRPC_SERVER_USE_TLS=yes", `GRPC_SERVER_USE_TLS="yes": want true or false`},
		{"PORT=http", `PORT="http": want a port number`},
		{"NEAR_LIMIT_RATIO=most", `NEAR_LIMIT_RATIO="most": want a number`},
		{"REDIS_TLS=maybe", `REDIS_TLS="maybe": want true or false`},
		{"RUNTIME_WATCH_ROOT=perhaps", `RUNTIME_WATCH_ROOT="perhaps"`},
		{"REDIS_TYPE=ring", `-redis-type "ring"`},
	} {
		var stderr syncBuffer
		code := runServe(context.Background(), nil, peerEnv(t.TempDir(), tt.env), io.Discard, &stderr, nil, nil)
		if code != 2 || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("%s: exit %d, %q; want 2 and %q", tt.env, code, stderr.String(), tt.want)
		}
	}
}
