package compare

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// SluiceName is the [Server.Name] of the servers [StartSluice] starts.
const SluiceName = "sluice-serve"

// SluiceConfig configures [StartSluice]. The zero values of Client, Mode
// and Timeout leave sluice-serve's own defaults.
type SluiceConfig struct {
	// Redis is the address of the Redis sluice-serve keeps its state in,
	// "127.0.0.1:PORT". Required.
	Redis string

	// Config is the limits, in envoyproxy/ratelimit's YAML format (one
	// domain), which sluice-serve reads unchanged; a rate_limit may also
	// say "algorithm: token-bucket". Required.
	Config string

	// Client is the Redis client, "rueidis" or "go-redis" (-client).
	Client string
	// Mode is what sluice-serve answers when Redis fails: "fail-open",
	// "fail-closed" or "degrade" (-mode).
	Mode string
	// Timeout bounds each decision's call to Redis; past it the answer
	// is Mode's (-timeout).
	Timeout time.Duration
	// Headers asks for RateLimit-* response headers (-headers).
	Headers bool
	// Args are more arguments, after the harness's own.
	Args []string
}

// StartSluice builds sluice-serve if this test binary has not yet
// ([SluiceBinary]), writes cfg.Config to a file, and runs
//
//	sluice-serve -config FILE -grpc-addr 127.0.0.1:PORT -http-addr 127.0.0.1:PORT -api-addr '' -redis ADDR [-client C] [-mode M] [-timeout D] [-headers] [Args...]
//
// on free ports. It returns once GET /healthz on the HTTP address answers
// 200 and the gRPC address accepts connections. t.Cleanup stops the
// server by PID. StartSluice fails the test if the command cannot be
// built or started: call SluiceBinary first to skip instead.
func StartSluice(t testing.TB, cfg SluiceConfig) *Server {
	t.Helper()
	if cfg.Redis == "" || cfg.Config == "" {
		t.Fatalf("compare: StartSluice needs Redis and Config")
	}
	bin, err := SluiceBinary()
	if err != nil {
		t.Fatalf("%v", err)
	}
	dir := t.TempDir()
	confPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(confPath, []byte(cfg.Config), 0o644); err != nil {
		t.Fatal(err)
	}
	return start(t, launch{
		name:  SluiceName,
		bin:   bin,
		dir:   dir,
		ports: 2,
		args: func(ports []int) ([]string, []string) {
			args := []string{
				"-config", confPath,
				"-grpc-addr", loopback(ports[0]),
				"-http-addr", loopback(ports[1]),
				"-api-addr", "",
				"-redis", cfg.Redis,
			}
			if cfg.Client != "" {
				args = append(args, "-client", cfg.Client)
			}
			if cfg.Mode != "" {
				args = append(args, "-mode", cfg.Mode)
			}
			if cfg.Timeout != 0 {
				args = append(args, "-timeout", cfg.Timeout.String())
			}
			if cfg.Headers {
				args = append(args, "-headers")
			}
			return append(args, cfg.Args...), environ(nil)
		},
		addrs: func(ports []int) (string, string) { return loopback(ports[0]), loopback(ports[1]) },
		ready: func(ctx context.Context, s *Server) error {
			if err := httpOK(ctx, "http://"+s.HTTPAddr+"/healthz"); err != nil {
				return err
			}
			return tcpOpen(ctx, s.GRPCAddr)
		},
	})
}
