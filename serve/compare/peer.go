package compare

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
)

// PeerName is the [Server.Name] of the servers [StartPeer] starts.
const PeerName = "envoyproxy/ratelimit"

// PeerConfig configures [StartPeer].
type PeerConfig struct {
	// Redis is the address of the Redis the peer keeps its counters in,
	// "127.0.0.1:PORT". Required.
	Redis string

	// Config is the limits: one file of envoyproxy/ratelimit's YAML
	// format (one domain). Required.
	Config string

	// Env holds more of the peer's settings (src/settings/settings.go),
	// such as "LIMIT_RESPONSE_HEADERS_ENABLED": "true" or
	// "REDIS_POOL_SIZE": "20". They win over the harness's own, except
	// the addresses and the runtime directory, which it owns.
	Env map[string]string
}

// peerSettings are the harness's settings for the peer besides its
// addresses. Stats are kept in the process but sent nowhere (no statsd to
// send them to); the Redis connection is plain TCP with the peer's
// default pool of 10; the configuration directory is watched rather than
// its root, which the harness never swaps.
var peerSettings = map[string]string{
	"USE_STATSD":         "false",
	"DISABLE_STATS":      "true",
	"LOG_LEVEL":          "warn",
	"REDIS_SOCKET_TYPE":  "tcp",
	"REDIS_TYPE":         "SINGLE",
	"RUNTIME_WATCH_ROOT": "false",
	"BACKEND_TYPE":       "redis",
}

// ownedSettings are the peer's settings that only the harness sets: where
// it listens and where it reads its configuration.
var ownedSettings = map[string]bool{
	"HOST": true, "PORT": true, "GRPC_HOST": true, "GRPC_PORT": true,
	"DEBUG_HOST": true, "DEBUG_PORT": true, "GRPC_UDS": true,
	"RUNTIME_ROOT": true, "RUNTIME_SUBDIRECTORY": true, "RUNTIME_APPDIRECTORY": true,
	"REDIS_URL": true, "USE_PROMETHEUS": true,
}

// StartPeer builds envoyproxy/ratelimit's server if this test binary has
// not yet ([PeerBinary]), writes cfg.Config where the peer reads it
// (RUNTIME_ROOT/ratelimit/config/config.yaml in a temporary directory),
// and starts the peer against cfg.Redis with its HTTP, gRPC and debug
// ports on free ports of 127.0.0.1. It returns once GET /healthcheck on
// the HTTP port answers 200 and the gRPC port accepts connections.
// t.Cleanup stops the peer by PID. StartPeer fails the test if the peer
// cannot be built or started.
//
// The peer's environment is built from scratch (PATH and HOME are kept),
// so the caller's environment cannot change its settings.
func StartPeer(t testing.TB, cfg PeerConfig) *Server {
	t.Helper()
	if cfg.Redis == "" || cfg.Config == "" {
		t.Fatalf("compare: StartPeer needs Redis and Config")
	}
	for k := range cfg.Env {
		if ownedSettings[k] {
			t.Fatalf("compare: StartPeer: the harness sets %s itself", k)
		}
	}
	bin, err := PeerBinary()
	if err != nil {
		t.Fatalf("%v", err)
	}
	dir := t.TempDir()
	confDir := filepath.Join(dir, "runtime", "ratelimit", "config")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(confDir, "config.yaml"), []byte(cfg.Config), 0o644); err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{
		"RUNTIME_ROOT":         filepath.Join(dir, "runtime"),
		"RUNTIME_SUBDIRECTORY": "ratelimit",
		"REDIS_URL":            cfg.Redis,
		"USE_PROMETHEUS":       "false",
	}
	for k, v := range peerSettings {
		settings[k] = v
	}
	for k, v := range cfg.Env {
		settings[k] = v
	}
	return start(t, launch{
		name:  PeerName,
		bin:   bin,
		dir:   dir,
		ports: 3,
		args: func(ports []int) ([]string, []string) {
			env := map[string]string{
				"HOST": "127.0.0.1", "PORT": strconv.Itoa(ports[0]),
				"GRPC_HOST": "127.0.0.1", "GRPC_PORT": strconv.Itoa(ports[1]),
				"DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": strconv.Itoa(ports[2]),
			}
			for k, v := range settings {
				env[k] = v
			}
			return nil, environ(env)
		},
		addrs: func(ports []int) (string, string) { return loopback(ports[1]), loopback(ports[0]) },
		ready: func(ctx context.Context, s *Server) error {
			// The peer opens its HTTP port after loading its
			// configuration, and its gRPC port from a goroutine
			// started just before: check both.
			if err := httpOK(ctx, "http://"+s.HTTPAddr+"/healthcheck"); err != nil {
				return err
			}
			return tcpOpen(ctx, s.GRPCAddr)
		},
	})
}

// environ returns a process environment of PATH and HOME from this
// process and the given variables, sorted.
func environ(vars map[string]string) []string {
	env := []string{}
	for _, k := range []string{"PATH", "HOME"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	for k, v := range vars {
		env = append(env, fmt.Sprintf("%s=%s", k, v))
	}
	sort.Strings(env)
	return env
}
