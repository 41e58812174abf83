package serve

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redisfaults"
	"github.com/sluicehq/sluice/stores/memstore"
)

// limitsOf is a configuration whose user limit is n a minute, and whose
// file says which version it is in a comment.
func limitsOf(version, n int) string {
	return fmt.Sprintf(`
# version %d
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: %d}
`, version, n)
}

// TestReloadUnderLoad changes the configuration ten times, one of them to
// an invalid file, while 64 streams decide: no request fails, each valid
// change is in force within a second, and the invalid one changes
// nothing.
//
// It times reloads, so it runs alone (not in parallel).
func TestReloadUnderLoad(t *testing.T) {
	h := start(t, limitsOf(0, 1000000), nil, func(c *Config) { c.Reload = 100 * time.Millisecond })
	// What the streams see: the requests_per_unit of their answers.
	var seen atomic.Int64
	var failed, rpcs atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			req := request("api", desc(fmt.Sprintf("user=u%d", i)))
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := h.client.ShouldRateLimit(context.Background(), req)
				rpcs.Add(1)
				if err != nil {
					if failed.Add(1) == 1 {
						t.Errorf("a request failed during the reloads: %v", err)
					}
					continue
				}
				seen.Store(int64(resp.Statuses[0].CurrentLimit.GetRequestsPerUnit()))
			}
		})
	}
	var worst time.Duration
	want := int64(1000000)
	canary := redisfaults.StartCanary()
	for v := 1; v <= 10; v++ {
		time.Sleep(150 * time.Millisecond)
		if v == 5 {
			writeConfig(t, h.path, "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
			time.Sleep(500 * time.Millisecond)
			if got := seen.Load(); got != want {
				t.Errorf("after an invalid file the limit is %d, want %d still", got, want)
			}
			continue
		}
		want = int64(1000000 + v)
		writeConfig(t, h.path, limitsOf(v, int(want)))
		changed := time.Now()
		for seen.Load() != want {
			if time.Since(changed) > 5*time.Second {
				t.Fatalf("change %d not in force after 5s", v)
			}
			time.Sleep(time.Millisecond)
		}
		worst = max(worst, time.Since(changed))
	}
	stalled := canary.Stop()
	close(stop)
	wg.Wait()
	t.Logf("%d requests during 10 changes; slowest change in force after %v (the process stalled %v at most)", rpcs.Load(), worst, stalled)
	// A second, and longer by the worst stall the canary saw.
	if worst > time.Second+stalled {
		t.Errorf("a change took %v to come into force, want at most 1s (the process stalled %v at most)", worst, stalled)
	}
	if got := h.srv.rejected.Load(); got != 1 {
		t.Errorf("%d configurations rejected, want 1", got)
	}
	if got := h.srv.reloads.Load(); got != 9 {
		t.Errorf("%d reloads, want 9", got)
	}
}

// TestReloadKeepsInvalid checks Reload's own answer to a bad file: the
// error names the file and line, and the old limits stay.
func TestReloadKeepsInvalid(t *testing.T) {
	t.Parallel()
	h := start(t, limitsOf(0, 7), nil)
	writeConfig(t, h.path, "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1, colour: blue}\n")
	err := h.srv.Reload()
	if err == nil || !strings.Contains(err.Error(), "limits.yaml:4") {
		t.Errorf("Reload of a file with an unknown key = %v, want an error at limits.yaml:4", err)
	}
	if got := h.ask(t, request("api", desc("user=a"))).Statuses[0].CurrentLimit.GetRequestsPerUnit(); got != 7 {
		t.Errorf("after a rejected reload the limit is %d, want 7", got)
	}
}

func TestDebugPort(t *testing.T) {
	t.Parallel()
	h := start(t, api, nil)
	h.ask(t, request("api", desc("user=a")))
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + h.srv.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz = %d %q", code, body)
	}
	if _, body := get("/metrics"); !strings.Contains(body, "\nsluice_rls_requests_total 1\n") || !strings.Contains(body, "sluice_limits_rules 9\n") {
		t.Errorf("/metrics:\n%s", body)
	}
	if _, body := get("/limits"); !strings.Contains(body, "domains: api\nrules: 9\n") {
		t.Errorf("/limits:\n%s", body)
	}
	hc := healthpb.NewHealthClient(h.conn)
	for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health of %q = %v, %v; want SERVING", svc, resp, err)
		}
	}
}

// TestGracefulStop stops the server with a request in flight: the request
// is answered, the health service says NOT_SERVING meanwhile, and Serve
// returns once it is done.
func TestGracefulStop(t *testing.T) {
	t.Parallel()
	mem, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	slow := &gate{Store: mem, entered: make(chan struct{}), release: make(chan struct{})}
	h := start(t, api, slow, func(c *Config) { c.Grace = 10 * time.Second })
	answered := make(chan error, 1)
	go func() {
		_, err := h.client.ShouldRateLimit(context.Background(), request("api", desc("user=a")))
		answered <- err
	}()
	<-slow.entered
	stopped := make(chan struct{})
	go func() {
		h.stop()
		close(stopped)
	}()
	for !h.srv.draining.Load() {
		time.Sleep(time.Millisecond)
	}
	resp, err := h.srv.health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: ""})
	if err != nil || resp.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health while stopping = %v, %v; want NOT_SERVING", resp, err)
	}
	select {
	case <-stopped:
		t.Fatal("Serve returned with a request in flight")
	case <-time.After(50 * time.Millisecond):
	}
	close(slow.release)
	if err := <-answered; err != nil {
		t.Errorf("the request in flight: %v", err)
	}
	<-stopped
}

// gate is a store whose first call waits for release.
type gate struct {
	core.Store
	once             sync.Once
	entered, release chan struct{}
}

func (g *gate) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	g.once.Do(func() {
		close(g.entered)
		<-g.release
	})
	return g.Store.Apply(ctx, req)
}

func TestNewServerErrors(t *testing.T) {
	t.Parallel()
	mem, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	if _, err := NewServer(Config{Limits: "x", GRPCAddr: "127.0.0.1:0"}); err == nil {
		t.Error("NewServer without a store succeeded")
	}
	if _, err := NewServer(Config{Store: mem, Limits: "/nonexistent/limits.yaml", GRPCAddr: "127.0.0.1:0"}); err == nil {
		t.Error("NewServer with a missing configuration succeeded")
	}
	var _ rlsv3.RateLimitServiceServer = (*Service)(nil)
}

// TestFingerprintFollowsLink sees a runtime directory's link swapped to a
// new version as a change, as a deployment that swaps "current" makes
// one, even when the files' names, sizes and times are the same.
func TestFingerprintFollowsLink(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	for _, v := range []string{"v1", "v2"} {
		if err := os.MkdirAll(filepath.Join(base, v), 0o755); err != nil {
			t.Fatal(err)
		}
		writeConfig(t, filepath.Join(base, v, "api.yaml"), limitsOf(0, 7))
	}
	link := filepath.Join(base, "current")
	if err := os.Symlink(filepath.Join(base, "v1"), link); err != nil {
		t.Fatal(err)
	}
	before, err := fingerprint(link)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := fingerprint(link); again != before {
		t.Fatal("fingerprint changed with nothing changed")
	}
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "v2"), link); err != nil {
		t.Fatal(err)
	}
	if after, _ := fingerprint(link); after == before {
		t.Error("fingerprint of a link swapped to another version did not change")
	}
}
