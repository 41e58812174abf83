package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/serve"
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

// TestServe runs sluice serve in process, on memory and on a real
// redis-server: it answers, reloads on a signal and stops with status 0.
func TestServe(t *testing.T) {
	for _, redisArgs := range [][]string{nil, {"-redis", redistest.Shared(t).Addr(), "-prefix", "cmd-serve-test:"}} {
		name := "memory"
		if redisArgs != nil {
			name = "redis"
		}
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "limits.yaml")
			if err := os.WriteFile(path, []byte(limitsV1), 0o644); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			reload := make(chan os.Signal, 1)
			ready := make(chan *serve.Server, 1)
			var stdout, stderr syncBuffer
			exited := make(chan int, 1)
			args := append([]string{"-config", path, "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-reload", "0"}, redisArgs...)
			go func() { exited <- runServe(ctx, args, &stdout, &stderr, reload, func(s *serve.Server) { ready <- s }) }()
			var srv *serve.Server
			select {
			case srv = <-ready:
			case code := <-exited:
				t.Fatalf("sluice serve exited %d: %s", code, stderr.String())
			}
			conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			client := rlsv3.NewRateLimitServiceClient(conn)
			limitOf := func() uint32 {
				t.Helper()
				req := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
					Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "a"}}}}}
				resp, err := client.ShouldRateLimit(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				return resp.Statuses[0].CurrentLimit.GetRequestsPerUnit()
			}
			if got := limitOf(); got != 10 {
				t.Fatalf("limit %d, want 10", got)
			}
			if err := os.WriteFile(path, []byte(strings.Replace(limitsV1, "10}", "20}", 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			reload <- os.Interrupt // any value reloads
			deadline := time.Now().Add(5 * time.Second)
			for limitOf() != 20 {
				if time.Now().After(deadline) {
					t.Fatalf("the reload did not take: %s", stderr.String())
				}
				time.Sleep(10 * time.Millisecond)
			}
			cancel()
			if code := <-exited; code != 0 {
				t.Errorf("sluice serve exited %d: %s", code, stderr.String())
			}
			if log := stderr.String(); !strings.Contains(log, "limits reloaded") || !strings.Contains(log, "stopping") {
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
		{nil, 2, "-config is required"},
		{[]string{"-config", bad, "-mode", "sometimes"}, 2, `-mode "sometimes"`},
		{[]string{"-config", bad, "-client", "jedis"}, 2, `-client "jedis"`},
		{[]string{"-config", bad, "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"-config", bad, "-grpc-addr", "127.0.0.1:0", "-http-addr", ""}, 1, "bad.yaml:4"},
		{[]string{"-h"}, 0, ""},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := runServe(context.Background(), tt.args, &stdout, &stderr, nil, nil)
		if code != tt.code || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("sluice serve %q = %d, stderr %q; want %d and %q", tt.args, code, stderr.String(), tt.code, tt.want)
		}
	}
	// The whole program knows serve, and the other commands.
	var stdout bytes.Buffer
	if code := cli.Run([]string{"help"}, &stdout, &stdout, cli.Commands(serveCommand)); code != 0 || !strings.Contains(stdout.String(), "\tserve ") || !strings.Contains(stdout.String(), "\tsim ") {
		t.Errorf("sluice help = %d:\n%s", code, stdout.String())
	}
}
