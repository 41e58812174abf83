package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/internal/redisfaults"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/serve"
	"github.com/sluicehq/sluice/telemetry"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// syncBuffer is a bytes.Buffer safe for the server's logger and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

const limitsV1 = `domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
`

// running is sluice-serve run in process by startServe, with a client.
type running struct {
	srv    *serve.Server
	client rlsv3.RateLimitServiceClient
	path   string      // the configuration file
	stderr *syncBuffer // the server's log
	reload chan os.Signal
	cancel context.CancelFunc
	exited chan int
	once   sync.Once
	code   int
}

// startServe writes config to a file and runs sluice-serve on it in
// process, on ports of its own, with args after its own (a flag given
// twice takes the later value), and connects a client to it. The server
// is stopped when the test ends, if not before (running.stop).
func startServe(t *testing.T, config string, args ...string) *running {
	t.Helper()
	return startServeEnv(t, config, nil, args...)
}

// startServeEnv is startServe in the environment environ
// ("NAME=value").
func startServeEnv(t *testing.T, config string, environ []string, args ...string) *running {
	t.Helper()
	path := filepath.Join(t.TempDir(), "limits.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{path: path, stderr: &syncBuffer{}, reload: make(chan os.Signal, 1), cancel: cancel, exited: make(chan int, 1)}
	ready := make(chan *serve.Server, 1)
	var stdout syncBuffer
	base := []string{"-config", path, "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-api-addr", "127.0.0.1:0", "-reload", "0", "-log-level", "info"}
	if !slices.Contains(args, "-redis") {
		base = append(base, "-backend", "memory")
	}
	args = append(base, args...)
	go func() {
		r.exited <- runServe(ctx, args, environ, &stdout, r.stderr, r.reload, func(s *serve.Server) { ready <- s })
	}()
	select {
	case r.srv = <-ready:
	case code := <-r.exited:
		cancel()
		t.Fatalf("sluice-serve exited %d: %s", code, r.stderr.String())
	}
	conn, err := grpc.NewClient(r.srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		r.stop()
		t.Fatal(err)
	}
	r.client = rlsv3.NewRateLimitServiceClient(conn)
	t.Cleanup(func() {
		conn.Close()
		if code := r.stop(); code != 0 {
			t.Errorf("sluice-serve exited %d: %s", code, r.stderr.String())
		}
	})
	return r
}

// stop stops the server, as SIGTERM does, and returns its exit status.
func (r *running) stop() int {
	r.once.Do(func() {
		r.cancel()
		r.code = <-r.exited
	})
	return r.code
}

// TestServe runs sluice-serve in process, on memory and on a real
// redis-server: it answers, reloads on a signal and stops with status 0.
func TestServe(t *testing.T) {
	for _, redisArgs := range [][]string{nil, {"-redis", redistest.Shared(t).Addr(), "-prefix", "cmd-serve-test:"}} {
		name := "memory"
		if redisArgs != nil {
			name = "redis"
		}
		t.Run(name, func(t *testing.T) {
			r := startServe(t, limitsV1, redisArgs...)
			limitOf := func() uint32 {
				t.Helper()
				req := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
					Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "a"}}}}}
				resp, err := r.client.ShouldRateLimit(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				return resp.Statuses[0].CurrentLimit.GetRequestsPerUnit()
			}
			if got := limitOf(); got != 10 {
				t.Fatalf("limit %d, want 10", got)
			}
			if err := os.WriteFile(r.path, []byte(strings.Replace(limitsV1, "10}", "20}", 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			r.reload <- os.Interrupt // any value reloads
			deadline := time.Now().Add(5 * time.Second)
			for limitOf() != 20 {
				if time.Now().After(deadline) {
					t.Fatalf("the reload did not take: %s", r.stderr.String())
				}
				time.Sleep(10 * time.Millisecond)
			}
			if code := r.stop(); code != 0 {
				t.Errorf("sluice-serve exited %d: %s", code, r.stderr.String())
			}
			if log := r.stderr.String(); !strings.Contains(log, "limits reloaded") || !strings.Contains(log, "stopping") {
				t.Errorf("the log lacks the reload or the stop:\n%s", log)
			}
		})
	}
}

func TestServeUsage(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: minutes, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "set RUNTIME_SUBDIRECTORY, or -config"},
		{[]string{"-config", bad, "-backend", "memcache"}, 2, `-backend "memcache"`},
		{[]string{"-config", bad, "-redis", ""}, 2, "-redis is empty"},
		{[]string{"-config", bad, "-redis-type", "ring"}, 2, `-redis-type "ring"`},
		{[]string{"-config", bad, "-log-level", "loud"}, 2, `-log-level "loud"`},
		{[]string{"-config", bad, "-mode", "sometimes"}, 2, `-mode "sometimes"`},
		{[]string{"-config", bad, "-client", "jedis"}, 2, `-client "jedis"`},
		{[]string{"-config", bad, "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"-config", bad, "-local-cache", "-1"}, 2, "-local-cache -1"},
		{[]string{"-config", bad, "-lease-all", "10"}, 2, "-lease-all is now named -allot-all"},
		{[]string{"-config", bad, "-backend", "memory", "-local-cache", "100"}, 2, "it needs -redis"},
		{[]string{"-config", bad, "-otlp-endpoint", "127.0.0.1:4317"}, 2, "-otlp-endpoint"},
		{[]string{"-config", bad, "-otlp-endpoint", "grpc://127.0.0.1:4317"}, 2, "want http://host:port"},
		{[]string{"-config", bad, "-otlp-endpoint", "http://collector"}, 2, "want a host and a port"},
		{[]string{"-config", bad, "-otlp-endpoint", "http://127.0.0.1:4317", "-trace-ratio", "2"}, 2, "-trace-ratio 2"},
		{[]string{"-config", bad, "-backend", "memory", "-grpc-addr", "127.0.0.1:0", "-http-addr", "", "-api-addr", ""}, 1, "bad.yaml:4"},
		{[]string{"-h"}, 0, ""},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := runServe(context.Background(), tt.args, nil, &stdout, &stderr, nil, nil)
		if code != tt.code || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("sluice-serve %q = %d, stderr %q; want %d and %q", tt.args, code, stderr.String(), tt.code, tt.want)
		}
	}
}

// scriptCalls returns how many script calls srv has run: EVALSHA and EVAL.
func scriptCalls(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	info := redisfaults.Info(t, srv, "commandstats")
	return redisfaults.InfoCount(info, "cmdstat_evalsha", "calls") + redisfaults.InfoCount(info, "cmdstat_eval", "calls")
}

// TestServeLocalCache runs sluice-serve with -local-cache on a redis-server
// of its own: once a key is over its limit, later requests for it are
// denied without a script call, also inside a request of two descriptors,
// and the metric counts them; a key under its limit still asks Redis.
func TestServeLocalCache(t *testing.T) {
	for _, client := range []string{"rueidis", "go-redis"} {
		t.Run(client, func(t *testing.T) {
			rdb := redistest.Start(t)
			// Token buckets that refill one every 20 minutes: no window
			// ends during the test.
			const config = `domain: api
descriptors:
  - key: user
    rate_limit: {limit: 3/hour, algorithm: token-bucket}
  - key: route
    rate_limit: {limit: 1000/hour, algorithm: token-bucket}
`
			r := startServe(t, config, "-redis", rdb.Addr(), "-client", client, "-local-cache", "1000")
			srv, ctx := r.srv, context.Background()
			ask := func(user string, withRoute bool) *rlsv3.RateLimitResponse {
				t.Helper()
				req := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
					Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: user}}}}}
				if withRoute {
					req.Descriptors = append(req.Descriptors, &ratelimitv3.RateLimitDescriptor{
						Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "route", Value: "/"}}})
				}
				resp, err := r.client.ShouldRateLimit(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				return resp
			}
			for i := range 4 { // three admitted, the fourth denied by Redis
				resp := ask("a", false)
				if want := i < 3; (resp.OverallCode == rlsv3.RateLimitResponse_OK) != want {
					t.Fatalf("request %d: %v, want OK %v", i+1, resp.OverallCode, want)
				}
			}
			// A request of two descriptors first loads its script (NOSCRIPT,
			// then EVAL): counted below as one call, as it will be.
			if resp := ask("c", true); resp.OverallCode != rlsv3.RateLimitResponse_OK {
				t.Fatalf("another user: %v", resp)
			}
			before := scriptCalls(t, rdb)
			const denied = 20
			for i := range denied {
				resp := ask("a", i%2 == 1)
				if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
					t.Fatalf("cached request %d: %v, want OVER_LIMIT", i+1, resp.OverallCode)
				}
				user := resp.Statuses[0]
				if user.Code != rlsv3.RateLimitResponse_OVER_LIMIT || user.LimitRemaining != 0 || user.GetCurrentLimit().GetRequestsPerUnit() != 3 ||
					user.DurationUntilReset.AsDuration() <= 0 || user.DurationUntilReset.AsDuration() > 20*time.Minute {
					t.Fatalf("cached request %d: the user's status %v", i+1, user)
				}
				if i%2 == 1 {
					// Not asked: its limit is known, what it has left is not.
					route := resp.Statuses[1]
					if route.Code != rlsv3.RateLimitResponse_OK || route.GetCurrentLimit().GetRequestsPerUnit() != 1000 || route.LimitRemaining != 0 || route.DurationUntilReset != nil {
						t.Fatalf("cached request %d: the route's status %v", i+1, route)
					}
				}
			}
			if got := scriptCalls(t, rdb) - before; got != 0 {
				t.Errorf("%d script calls for %d requests of a key over its limit, want 0", got, denied)
			}
			if got := srv.Service().Stats().LocalCache.Load(); got != denied {
				t.Errorf("LocalCache = %d, want %d", got, denied)
			}
			metrics, err := http.Get("http://" + srv.HTTPAddr() + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(metrics.Body)
			metrics.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if want := "\nsluice_rls_local_cache_over_limit_total " + strconv.Itoa(denied) + "\n"; !strings.Contains(string(body), want) {
				t.Errorf("/metrics lacks %q:\n%s", want[1:], body)
			}
			// Another user is still decided by Redis.
			before = scriptCalls(t, rdb)
			if resp := ask("b", true); resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[1].LimitRemaining != 998 {
				t.Fatalf("another user: %v", resp)
			}
			if got := scriptCalls(t, rdb) - before; got != 1 {
				t.Errorf("%d script calls for a key under its limit, want 1", got)
			}
		})
	}
}

// collector is an OTLP/gRPC trace collector that keeps the spans it is
// sent.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			c.spans = append(c.spans, ss.Spans...)
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// TestServeTraces runs sluice-serve with -otlp-endpoint against a real
// gRPC collector: a request carrying Envoy's sampled W3C trace context is
// traced in Envoy's trace, its store decision as its child; a request
// without one is not, at -trace-ratio 0; the spans reach the collector by
// the time the server has stopped.
func TestServeTraces(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	col := &collector{}
	gs := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(gs, col)
	go gs.Serve(lis)
	defer gs.Stop()

	r := startServe(t, limitsV1, "-http-addr", "", "-otlp-endpoint", "http://"+lis.Addr().String(), "-trace-ratio", "0")
	ctx := context.Background()
	req := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "a"}}}}}
	const (
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		parent  = "00f067aa0ba902b7"
	)
	traced := metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+traceID+"-"+parent+"-01")
	if _, err := r.client.ShouldRateLimit(traced, req); err != nil {
		t.Fatal(err)
	}
	if _, err := r.client.ShouldRateLimit(ctx, req); err != nil { // not sampled
		t.Fatal(err)
	}
	if code := r.stop(); code != 0 { // the last spans are sent as it stops
		t.Fatalf("sluice-serve exited %d: %s", code, r.stderr.String())
	}

	col.mu.Lock()
	defer col.mu.Unlock()
	var rls, store *tracepb.Span
	for _, s := range col.spans {
		switch s.Name {
		case "sluice.rls.ShouldRateLimit":
			if rls != nil {
				t.Errorf("two request spans: the unsampled request was traced")
			}
			rls = s
		case telemetry.SpanName:
			store = s
		}
	}
	if rls == nil || store == nil {
		t.Fatalf("the collector got %d spans, without the request's or the store's: %v", len(col.spans), col.spans)
	}
	if got := hex.EncodeToString(rls.TraceId); got != traceID {
		t.Errorf("the request's span is in trace %s, want Envoy's %s", got, traceID)
	}
	if got := hex.EncodeToString(rls.ParentSpanId); got != parent {
		t.Errorf("the request's span has parent %s, want Envoy's %s", got, parent)
	}
	if !bytes.Equal(store.TraceId, rls.TraceId) || !bytes.Equal(store.ParentSpanId, rls.SpanId) {
		t.Errorf("the store's span (trace %x, parent %x) is not the request span's child (trace %x, span %x)", store.TraceId, store.ParentSpanId, rls.TraceId, rls.SpanId)
	}
}

// TestServeRedisDownAtStart starts sluice-serve, with each client, on a
// Redis that is down: it serves at once, answering in -mode (fail-open:
// OK with no current_limit), and once the same server is back, decisions
// come from Redis again, without a restart.
func TestServeRedisDownAtStart(t *testing.T) {
	for _, client := range []string{"rueidis", "go-redis"} {
		t.Run(client, func(t *testing.T) {
			rdb := redistest.Start(t)
			if err := rdb.Kill(); err != nil {
				t.Fatal(err)
			}
			r := startServe(t, limitsV1, "-redis", rdb.Addr(), "-client", client, "-timeout", "50ms")
			ask := func() *rlsv3.RateLimitResponse_DescriptorStatus {
				t.Helper()
				req := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
					Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "a"}}}}}
				resp, err := r.client.ShouldRateLimit(context.Background(), req)
				if err != nil {
					t.Fatalf("with Redis down: %v, want an answer in -mode", err)
				}
				return resp.Statuses[0]
			}
			for range 3 {
				if st := ask(); st.Code != rlsv3.RateLimitResponse_OK || st.CurrentLimit != nil {
					t.Fatalf("with Redis down: %v, want OK with no current_limit (fail-open)", st)
				}
			}
			if err := rdb.Restart(); err != nil {
				t.Fatal(err)
			}
			// A request answered by -mode after the restart may still have
			// been charged in Redis (its reply late past the 50 ms
			// deadline on a loaded machine): the first decision from
			// Redis leaves 9, less one for each of them at most.
			deadline := time.Now().Add(15 * time.Second)
			for answered := uint32(0); ; answered++ {
				st := ask()
				if st.CurrentLimit != nil {
					if st.Code != rlsv3.RateLimitResponse_OK || st.LimitRemaining > 9 || st.LimitRemaining+min(answered, 9) < 9 {
						t.Fatalf("the first decision from Redis, after %d answered by -mode: %v, want OK with 9 left, less one for each at most", answered, st)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no decision from Redis 15 s after it came back: %v\n%s", st, r.stderr.String())
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// TestServeSlowRedis starts sluice-serve, with each client, on a Redis
// whose every reply comes 400 ms late, with -timeout 5s (as
// REDIS_TIMEOUT=5s sets it): a new connection's handshake is as slow as
// any call, and the decisions come from Redis, not from -mode. The
// handshake and the first call take four such replies, 1.6 s: the rest
// of the 5 s is for a loaded machine's stalls. (With
// dials cut off at 250 ms whatever -timeout said, rueidis could never
// connect, and every request was answered fail-open; on a loaded machine,
// a connection opened while Redis waited for a core did the same to one
// request of TestPeerIntegration.)
func TestServeSlowRedis(t *testing.T) {
	for _, client := range []string{"rueidis", "go-redis"} {
		t.Run(client, func(t *testing.T) {
			rdb := redistest.Start(t)
			proxy := redistest.NewProxy(t, rdb.Addr())
			proxy.Delay(400 * time.Millisecond)
			r := startServe(t, limitsV1, "-redis", proxy.Addr(), "-client", client, "-timeout", "5s")
			req := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
				Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "a"}}}}}
			// The limit's window is the clock's minute, and a request
			// that began a new one (its reset further off than the last
			// one's) has 9 left again.
			var used uint32
			var reset time.Duration
			for i := range 3 {
				resp, err := r.client.ShouldRateLimit(context.Background(), req)
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				st := resp.Statuses[0]
				next := st.GetDurationUntilReset().AsDuration()
				if next > reset {
					used = 0
				}
				reset = next
				if st.Code != rlsv3.RateLimitResponse_OK || st.CurrentLimit == nil || st.LimitRemaining != 9-used {
					t.Fatalf("request %d: %v, want OK with %d left, decided by Redis\n%s", i, st, 9-used, r.stderr.String())
				}
				used++
			}
		})
	}
}
