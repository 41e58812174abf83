package serve

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/serve/limits"
)

// DefaultReload is how often a [Server] looks for a changed configuration
// unless [Config.Reload] says otherwise.
const DefaultReload = time.Second

// DefaultGrace is how long a [Server] lets requests in flight finish when
// it stops, unless [Config.Grace] says otherwise.
const DefaultGrace = 10 * time.Second

// streamWorkers is how many goroutines serve requests without starting
// one per request (grpc.NumStreamWorkers).
const streamWorkers = 256

// The flow-control windows of the gRPC port, in bytes: HTTP/2's default
// for a stream, and room for every stream's request at once on a
// connection.
const (
	streamWindow = 64 << 10
	connWindow   = 1 << 20
)

// Config is what a [Server] serves.
type Config struct {
	// Store decides; required. The server does not close it.
	Store core.Store
	// Limits is the configuration's path: a YAML file, or a directory of
	// them (see [limits.Load]); required.
	Limits string
	// LimitOptions are the options the configuration is loaded with.
	LimitOptions limits.Options
	// GRPCAddr is where the RLS service and the gRPC health service
	// listen, such as "127.0.0.1:8081"; required. Port 0 picks a free
	// port ([Server.GRPCAddr] says which).
	GRPCAddr string
	// GRPCNetwork is GRPCAddr's network: "tcp" (the default, also for
	// "") or "unix", GRPCAddr then being a Unix socket's path, as
	// envoyproxy/ratelimit's GRPC_UDS. TLS on the port is a GRPC option
	// (grpc.Creds).
	GRPCNetwork string
	// HTTPAddr, if set, is where the debug port listens: /healthz,
	// /metrics (Prometheus text format), /limits (what is loaded) and
	// /debug/pprof/ (Go's profiles).
	HTTPAddr string
	// APIAddr, if set, is where envoyproxy/ratelimit's HTTP port listens
	// (its HOST:PORT): /healthcheck, answered as the service answers it
	// (200 "OK" while healthy, else 500), and /json, a request of the RLS
	// API as JSON (see [Server.JSONHandler]).
	APIAddr string
	// MetricsAddr and MetricsPath, if MetricsAddr is set, serve /metrics'
	// text on a port of its own, as envoyproxy/ratelimit's
	// USE_PROMETHEUS, PROMETHEUS_ADDR and PROMETHEUS_PATH; MetricsPath ""
	// means "/metrics".
	MetricsAddr, MetricsPath string
	// HealthyWithConfig makes /healthcheck fail while the configuration in
	// force declares no domain, as envoyproxy/ratelimit's
	// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED.
	HealthyWithConfig bool
	// Allotments reports that Store takes allotments for the rules that
	// say so (stores/layered with [limits.AllotmentOf] as its
	// Config.Allot). If false, a configuration with such rules loads with
	// a warning that their allotments are not taken.
	Allotments bool
	// StoreHealthy, if set, makes /healthcheck fail while it reports
	// false, as envoyproxy/ratelimit's REDIS_HEALTH_CHECK_ACTIVE_CONNECTION
	// fails it while Redis has no connection. nil: the store's health
	// does not count (the service's default), since the breaker answers
	// while Redis is down.
	StoreHealthy func() bool
	// Reload is how often the configuration is read again and, if it
	// changed and is valid, put in force; 0 means [DefaultReload], and a
	// negative value turns the polling off ([Server.Reload] still
	// reloads, as sluice-serve does on SIGHUP).
	Reload time.Duration
	// Grace is how long Serve lets requests in flight finish when its
	// context ends; 0 means [DefaultGrace].
	Grace time.Duration
	// Service are the options of the RLS service.
	Service []Option
	// GRPC are extra options for the gRPC server.
	GRPC []grpc.ServerOption
	// Logger receives a line for each configuration change, rejected
	// configuration and shutdown; nil discards them.
	Logger *slog.Logger
}

// Server is sluice-serve: a [Service] on a gRPC port, with the gRPC
// health service, a debug HTTP port and configuration reloading. Make one
// with [NewServer] and run it with [Server.Serve].
type Server struct {
	cfg     Config
	svc     *Service
	log     *slog.Logger
	grpc    *grpc.Server
	health  *health.Server
	lis     net.Listener
	httpLis net.Listener
	ports   []httpPort // the debug port first, if any

	mu       sync.Mutex // serializes reloads
	loadedAt atomic.Pointer[time.Time]
	reloads  atomic.Int64 // configurations put in force after the first
	rejected atomic.Int64 // configurations rejected
	draining atomic.Bool
}

// The services a [Server]'s health service reports on: the server as a
// whole ("") and the RLS service.
const healthRLS = "envoy.service.ratelimit.v3.RateLimitService"

// healthPeer is the service envoyproxy/ratelimit's gRPC health reports on,
// as [Server.Healthy] says, but for the store (checked only over HTTP).
const healthPeer = "ratelimit"

// httpPort is an HTTP port of the server.
type httpPort struct {
	what string
	lis  net.Listener
	srv  *http.Server
}

// NewServer loads the configuration and opens the server's ports. It
// fails if the configuration is invalid (the error names each problem's
// file and line) or a port cannot be opened.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, core.ErrNoStore
	}
	if cfg.Limits == "" || cfg.GRPCAddr == "" {
		return nil, errors.New("serve: Config needs Limits and GRPCAddr")
	}
	switch cfg.GRPCNetwork {
	case "":
		cfg.GRPCNetwork = "tcp"
	case "tcp", "unix":
	default:
		return nil, fmt.Errorf("serve: Config.GRPCNetwork %q: want tcp or unix", cfg.GRPCNetwork)
	}
	if cfg.Reload == 0 {
		cfg.Reload = DefaultReload
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	set, err := limits.Load(cfg.Limits, cfg.LimitOptions)
	if err != nil {
		return nil, err
	}
	svc, err := NewService(cfg.Store, set, cfg.Service...)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, svc: svc, log: log, health: health.NewServer()}
	now := time.Now()
	s.loadedAt.Store(&now)
	s.lis, err = net.Listen(cfg.GRPCNetwork, cfg.GRPCAddr)
	if err != nil {
		return nil, fmt.Errorf("serve: gRPC port: %w", err)
	}
	if cfg.HTTPAddr != "" {
		s.httpLis, err = net.Listen("tcp", cfg.HTTPAddr)
		if err != nil {
			s.lis.Close()
			return nil, fmt.Errorf("serve: HTTP port: %w", err)
		}
		s.ports = append(s.ports, httpPort{"debug", s.httpLis, &http.Server{Handler: s.debugHandler(), ReadHeaderTimeout: 5 * time.Second}})
	}
	for _, p := range []struct {
		what, addr string
		h          func() http.Handler
	}{{"API", cfg.APIAddr, s.apiHandler}, {"metrics", cfg.MetricsAddr, s.metricsHandler}} {
		if p.addr == "" {
			continue
		}
		lis, err := net.Listen("tcp", p.addr)
		if err != nil {
			s.lis.Close()
			for _, q := range s.ports {
				q.lis.Close()
			}
			return nil, fmt.Errorf("serve: %s port: %w", p.what, err)
		}
		s.ports = append(s.ports, httpPort{p.what, lis, &http.Server{Handler: p.h(), ReadHeaderTimeout: 5 * time.Second}})
	}
	// Stream workers: each request runs on a goroutine that has served
	// requests before, whose stack has grown to the chain's depth, rather
	// than on a new one whose stack grows (and is copied) for every
	// request: that copying was a sixth of the server's CPU. Requests
	// beyond the workers get a goroutine of their own, as without them.
	// The codec reads requests in Envoy's shape with fewer allocations
	// than protobuf, and everything else as protobuf does (codec).
	// Static flow-control windows: a request and its answer are a few
	// hundred bytes, which never fill the windows, and the windows'
	// estimate of the bandwidth-delay product costs a ping, and its
	// answer on the other side, for every burst of requests.
	opts := append([]grpc.ServerOption{
		grpc.NumStreamWorkers(streamWorkers),
		grpc.ForceServerCodecV2(newCodec()),
		grpc.InitialWindowSize(streamWindow),
		grpc.InitialConnWindowSize(connWindow),
	}, cfg.GRPC...)
	s.grpc = grpc.NewServer(opts...)
	rlsv3.RegisterRateLimitServiceServer(s.grpc, svc)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	s.health.SetServingStatus(healthPeer, s.peerHealth())
	log.Info("limits loaded", "path", cfg.Limits, "domains", len(set.Domains()), "rules", set.Len())
	s.logWarnings(set)
	return s, nil
}

// Service returns the server's RLS service.
func (s *Server) Service() *Service { return s.svc }

// GRPCAddr returns the address the gRPC port listens on: host:port, or
// a Unix socket's path.
func (s *Server) GRPCAddr() string { return s.lis.Addr().String() }

// HTTPAddr returns the address the debug port listens on; "" if none.
func (s *Server) HTTPAddr() string {
	if s.httpLis == nil {
		return ""
	}
	return s.httpLis.Addr().String()
}

// APIAddr returns the address envoyproxy/ratelimit's HTTP port
// (/healthcheck, /json) listens on; "" if none.
func (s *Server) APIAddr() string { return s.portAddr("API") }

// MetricsAddr returns the address the metrics port listens on; "" if none.
func (s *Server) MetricsAddr() string { return s.portAddr("metrics") }

func (s *Server) portAddr(what string) string {
	for _, p := range s.ports {
		if p.what == what {
			return p.lis.Addr().String()
		}
	}
	return ""
}

// Serve serves until ctx ends, then stops: the health service turns to
// NOT_SERVING, new requests are refused, requests in flight get up to
// Config.Grace to finish, and Serve returns nil. It returns early with
// an error only if a port fails. The goroutines it starts end before it
// returns.
func (s *Server) Serve(ctx context.Context) error {
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(healthRLS, healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(healthPeer, s.peerHealth())
	errc := make(chan error, 1+len(s.ports))
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := s.grpc.Serve(s.lis); err != nil {
			errc <- fmt.Errorf("serve: gRPC: %w", err)
		}
	})
	for _, p := range s.ports {
		wg.Go(func() {
			if err := p.srv.Serve(p.lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("serve: HTTP: %w", err)
			}
		})
	}
	stopPoll := make(chan struct{})
	if s.cfg.Reload > 0 {
		wg.Go(func() { s.poll(stopPoll) })
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	close(stopPoll)
	s.stop()
	wg.Wait()
	return err
}

// stop drains and closes both ports.
func (s *Server) stop() {
	s.draining.Store(true)
	s.health.Shutdown() // every service NOT_SERVING, so that Envoy stops sending
	s.log.Info("stopping", "grace", s.cfg.Grace)
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	t := time.NewTimer(s.cfg.Grace)
	select {
	case <-done:
		t.Stop()
	case <-t.C:
		s.grpc.Stop()
		<-done
	}
	for _, p := range s.ports {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		p.srv.Shutdown(ctx)
		cancel()
	}
}

// poll reloads the configuration every Config.Reload until stop closes,
// when its files' names, sizes or modification times changed: a file
// that stays invalid is reported once, not at every look.
func (s *Server) poll(stop <-chan struct{}) {
	t := time.NewTicker(s.cfg.Reload)
	defer t.Stop()
	last, _ := fingerprint(s.cfg.Limits)
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		fp, err := fingerprint(s.cfg.Limits)
		if err == nil && fp == last {
			continue
		}
		last = fp
		s.Reload()
	}
}

// fingerprint identifies the files under path as they are now: where
// path leads (a link, such as a runtime directory's "current", swapped to
// a new version), and every regular file's name, size and modification
// time.
func fingerprint(path string) ([32]byte, error) {
	h := sha256.New()
	root, err := filepath.EvalSymlinks(path)
	if err != nil {
		return [32]byte{}, err
	}
	fmt.Fprintf(h, "%s\x00", root)
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00%d\x00", p, info.Size(), info.ModTime().UnixNano())
		return nil
	})
	return [32]byte(h.Sum(nil)), err
}

// Reload reads the configuration again. If it is valid and differs from
// the one in force, it is put in force at once, requests in flight
// finishing under the old one, and Reload logs and counts the change. If
// it is invalid, the configuration in force stays, and Reload logs,
// counts and returns the error.
func (s *Server) Reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	set, err := limits.Load(s.cfg.Limits, s.cfg.LimitOptions)
	if err != nil {
		s.rejected.Add(1)
		s.log.Error("limits rejected; the previous limits stay in force", "path", s.cfg.Limits, "err", err)
		return err
	}
	old := s.svc.Limits()
	if set.Digest() == old.Digest() {
		return nil
	}
	s.svc.SetLimits(set)
	s.health.SetServingStatus(healthPeer, s.peerHealth())
	now := time.Now()
	s.loadedAt.Store(&now)
	s.reloads.Add(1)
	s.log.Info("limits reloaded", "path", s.cfg.Limits, "domains", len(set.Domains()), "rules", set.Len())
	s.logWarnings(set)
	return nil
}

// logWarnings logs what loading set found that did not stop it: a key
// given twice, a file that could not be read, no rule, rules with an
// allotment on a store that takes none.
func (s *Server) logWarnings(set *limits.Set) {
	log := s.log
	if set.Len() == 0 {
		log.Warn("no limits loaded: every request is answered OK")
	}
	if n := set.Allotted(); n > 0 && !s.cfg.Allotments {
		log.Warn("limits: rules have an allotment, but the store takes none: they are decided without (sluice-serve takes allotments when started with -allot-all, or with a rule that has one)", "rules", n)
	}
	for _, w := range set.Warnings() {
		log.Warn("limits: "+w.Msg, "file", w.File, "line", w.Line)
	}
}
