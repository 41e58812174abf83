package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	"github.com/redis/rueidis"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/serve"
	"github.com/sluicehq/sluice/serve/limits"
	"github.com/sluicehq/sluice/stores/layered"
	"github.com/sluicehq/sluice/stores/memstore"
	"github.com/sluicehq/sluice/stores/redisstore"
	"github.com/sluicehq/sluice/stores/rueidisstore"
	"github.com/sluicehq/sluice/telemetry"
)

// serveGOGC is the garbage collector's target sluice-serve runs with
// unless GOGC is set. Each request allocates its messages; at Go's
// default of 100 the collector runs so often that it takes a tenth of the
// server's CPU, and shrinks the idle stream workers' stacks, which then
// grow again, copied, on their next request. At 400, on 2 cores, 3
// descriptors, 64 streams: 21,200 decisions/s against 18,600 (medians of
// 4 alternating runs), for a peak RSS of 69 MB against 45 at 256
// streams.
const serveGOGC = 400

// modes are -mode's values.
var modes = map[string]policy.Mode{"fail-open": policy.FailOpen, "fail-closed": policy.FailClosed, "degrade": policy.Degrade}

// runServe is sluice-serve until ctx ends, configured by args and by the
// environment environ (envoyproxy/ratelimit's variables, "NAME=value"):
// each value on reload reloads the configuration, and ready, if not nil,
// is called with the server once its ports are open.
func runServe(ctx context.Context, args, environ []string, stdout, stderr io.Writer, reload <-chan os.Signal, ready func(*serve.Server)) int {
	fs := flag.NewFlagSet("sluice-serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		config    = fs.String("config", "", "the limits: a `file` in envoyproxy/ratelimit's format, or a directory of them; empty: the peer's RUNTIME_ROOT, RUNTIME_SUBDIRECTORY, RUNTIME_APPDIRECTORY and RUNTIME_WATCH_ROOT say where (docs/serve.md)")
		ignoreDot = fs.Bool("ignore-dotfiles", false, "skip configuration files and directories whose names begin with . (RUNTIME_IGNOREDOTFILES; a Kubernetes ConfigMap volume needs it)")
		grpcAddr  = fs.String("grpc-addr", net.JoinHostPort(peerHost, peerGRPCPort), "the `address` the RLS gRPC service and gRPC health listen on (GRPC_HOST:GRPC_PORT)")
		grpcUDS   = fs.String("grpc-uds", "", "serve gRPC on the Unix socket at this `path` instead of -grpc-addr (GRPC_UDS)")
		grpcTLSOn = fs.Bool("grpc-tls", false, "serve gRPC over TLS, with -grpc-tls-cert and -grpc-tls-key (GRPC_SERVER_USE_TLS)")
		grpcCert  = fs.String("grpc-tls-cert", "", "with -grpc-tls: the server's certificate chain, a PEM `file`, read again when it changes (GRPC_SERVER_TLS_CERT)")
		grpcKey   = fs.String("grpc-tls-key", "", "with -grpc-tls: the server's private key, a PEM `file`, read again when it changes (GRPC_SERVER_TLS_KEY)")
		clientCA  = fs.String("grpc-client-ca", "", "with -grpc-tls: require a client certificate signed by a CA of this PEM `file` (GRPC_CLIENT_TLS_CACERT)")
		clientSAN = fs.String("grpc-client-san", "", "with -grpc-client-ca: require a client certificate that names this `host` (GRPC_CLIENT_TLS_SAN)")
		apiAddr   = fs.String("api-addr", net.JoinHostPort(peerHost, peerPort), "the `address` of envoyproxy/ratelimit's HTTP port: /healthcheck and /json (HOST:PORT); empty for none")
		httpAddr  = fs.String("http-addr", net.JoinHostPort(peerHost, peerDebugPort), "the debug `address`: /healthz, /metrics, /limits, /debug/pprof/ (DEBUG_HOST:DEBUG_PORT); empty for none")
		metrics   = fs.String("metrics-addr", "", "also serve /metrics' text on this `address` (PROMETHEUS_ADDR, with USE_PROMETHEUS=true); empty for none")
		mpath     = fs.String("metrics-path", "/metrics", "the `path` of -metrics-addr's metrics (PROMETHEUS_PATH)")
		backend   = fs.String("backend", "redis", "where decisions are kept: redis, or memory (in this process only: enough to try it, wrong for more than one instance) (BACKEND_TYPE)")
		addr      = fs.String("redis", peerRedisURL, "the Redis `address`: host:port, or a Unix socket's path; several, comma-separated, for a Cluster; for a Sentinel, the master's name then the sentinels' addresses (REDIS_URL)")
		sockType  = fs.String("redis-socket-type", "", "tcp or unix; empty: unix for an address that is a path, else tcp (REDIS_SOCKET_TYPE)")
		redisType = fs.String("redis-type", "single", "single, cluster or sentinel (REDIS_TYPE)")
		cluster   = fs.Bool("cluster", false, "the addresses are a Redis Cluster's: -redis-type cluster")
		redisTLS  = fs.Bool("redis-tls", false, "connect to Redis over TLS (REDIS_TLS; REDIS_TLS_CLIENT_CERT, REDIS_TLS_CLIENT_KEY, REDIS_TLS_CACERT and REDIS_TLS_SKIP_HOSTNAME_VERIFICATION are read from the environment, as REDIS_AUTH and REDIS_SENTINEL_AUTH are)")
		poolSize  = fs.Int("redis-pool-size", 10, "go-redis's connections per node (REDIS_POOL_SIZE); rueidis pipelines on one")
		clientN   = fs.String("client", "rueidis", "the Redis `client`: rueidis (rueidisstore) or go-redis (redisstore)")
		prefix    = fs.String("prefix", "sluice:", "the Redis key `prefix` (CACHE_KEY_PREFIX)")
		modeName  = fs.String("mode", "fail-open", "what a decision is while Redis is down: fail-open, fail-closed or degrade")
		timeout   = fs.Duration("timeout", 100*time.Millisecond, "the deadline of each Redis call; past it the breaker answers in -mode (REDIS_TIMEOUT, if set)")
		inst      = fs.Int("instances", 1, "how many sluice-serve processes share the limits (degrade mode decides each under its share)")
		cache     = fs.Int("local-cache", 0, "hold up to this many `keys` over their limit in this process, and deny them without asking Redis until they may pass (LOCAL_CACHE_SIZE_IN_BYTES ÷ 512); 0: none")
		allotAll  = fs.Int64("allot-all", 0, "take allotments of up to `N` requests (spent in this process) for every fixed-window, token-bucket or gcra rule of at least 100×N requests per unit that does not say its own (sluice's rate_limit key allotment); 0: only those that do")
		headers   = fs.Bool("headers", false, "add RateLimit-Limit, -Remaining and -Reset to every response (LIMIT_RESPONSE_HEADERS_ENABLED)")
		hLimit    = fs.String("limit-header", "RateLimit-Limit", "the `name` of -headers' limit (LIMIT_LIMIT_HEADER)")
		hRemain   = fs.String("remaining-header", "RateLimit-Remaining", "the `name` of -headers' remaining (LIMIT_REMAINING_HEADER)")
		hReset    = fs.String("reset-header", "RateLimit-Reset", "the `name` of -headers' reset (LIMIT_RESET_HEADER)")
		near      = fs.Float64("near-limit-ratio", serve.DefaultNearLimitRatio, "the share of a limit past which hits count as near_limit (NEAR_LIMIT_RATIO)")
		healthy   = fs.Bool("healthy-with-config", false, "fail /healthcheck while no domain is configured (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED)")
		storeHlth = fs.Bool("store-health", false, "fail /healthcheck while the breaker finds Redis down (REDIS_HEALTH_CHECK_ACTIVE_CONNECTION)")
		exact     = fs.Bool("exact-reset", false, "report duration_until_reset to the microsecond; by default in whole seconds, rounded up, as envoyproxy/ratelimit (Envoy's X-RateLimit-Reset reads only the seconds)")
		unitMult  = fs.Bool("unit-multiplier", false, "decide a limit override over its unit × unit_multiplier, as Envoy's API describes; by default the multiplier is ignored, as envoyproxy/ratelimit ignores it")
		shadow    = fs.Bool("shadow-mode", false, "answer every request OK, its descriptors still decided and counted (SHADOW_MODE)")
		logLevel  = fs.String("log-level", peerLogLevel, "debug, info, warn or error (LOG_LEVEL)")
		logFormat = fs.String("log-format", "text", "text or json (LOG_FORMAT)")
		maxAge    = fs.Duration("grpc-max-connection-age", peerMaxAge, "close a gRPC connection this long after it opened, ±10% (GRPC_MAX_CONNECTION_AGE)")
		maxGrace  = fs.Duration("grpc-max-connection-age-grace", peerMaxAgeWait, "then let its requests finish for this long (GRPC_MAX_CONNECTION_AGE_GRACE)")
		maxDsc    = fs.Int("max-descriptors", serve.DefaultMaxDescriptors, "the most descriptors one request may carry")
		otlp      = fs.String("otlp-endpoint", "", "send traces to the OTLP/gRPC collector at this `URL`: http://host:4317 in plain text, https://host:4317 over TLS; empty: no traces (OTEL_EXPORTER_OTLP_ENDPOINT, with TRACING_ENABLED=true and TRACING_EXPORTER_PROTOCOL=grpc)")
		ratio     = fs.Float64("trace-ratio", 0.01, "the share of requests traced when Envoy sent no sampled trace context (0 to 1; with -otlp-endpoint) (TRACING_SAMPLING_RATE)")
		dstats    = fs.Int("descriptor-stats", serve.DefaultMaxDescriptorStats, "count hits per descriptor, as envoyproxy/ratelimit's stats, for at most this many `names` (the rest together, as _other); 0: none (DISABLE_STATS=true)")
		merge     = fs.Bool("merge-domains", false, "let several files declare one domain (MERGE_DOMAIN_CONFIG)")
		every     = fs.Duration("reload", serve.DefaultReload, "how often to look for a changed configuration; 0: only on SIGHUP")
		grace     = fs.Duration("grace", serve.DefaultGrace, "how long requests in flight may finish when the server stops")
	)
	lookup := func(name string) (string, bool) {
		for i := len(environ) - 1; i >= 0; i-- {
			if k, v, _ := strings.Cut(environ[i], "="); k == name {
				return v, true
			}
		}
		return "", false
	}
	env, err := applyEnv(fs, lookup, environ)
	if err != nil {
		fmt.Fprintf(stderr, "sluice-serve: %v\n", err)
		return 2
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, "Usage: sluice-serve [flags]\n\n"+
				"Serves Envoy's rate-limit service (envoy.service.ratelimit.v3.RateLimitService)\n"+
				"over a sluice store chain: telemetry, a breaker and a Redis store (see docs/serve.md).\n"+
				"envoyproxy/ratelimit's environment variables, named after each flag, set its default;\n"+
				"a flag overrides them. SIGHUP reloads the configuration; SIGINT and SIGTERM stop\n"+
				"the server gracefully.\n\nFlags:\n")
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		if strings.Contains(err.Error(), "-lease-all") {
			err = errors.New("-lease-all is now named -allot-all (docs/changes.md)")
		}
		fmt.Fprintf(stderr, "sluice-serve: %v\n", err)
		return 2
	}
	if *cluster {
		*redisType = "cluster"
	}
	var level slog.Level
	switch *logLevel {
	case "trace", "debug":
		level = slog.LevelDebug
	case "info":
		level = slog.LevelInfo
	case "warn", "warning":
		level = slog.LevelWarn
	case "error", "fatal", "panic":
		level = slog.LevelError
	default:
		fmt.Fprintf(stderr, "sluice-serve: -log-level %q: want debug, info, warn or error\n", *logLevel)
		return 2
	}
	var handler slog.Handler
	switch *logFormat {
	case "text":
		handler = slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})
	case "json":
		handler = slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level})
	default:
		fmt.Fprintf(stderr, "sluice-serve: -log-format %q: want text or json\n", *logFormat)
		return 2
	}
	log := slog.New(handler)
	appDir := ""
	if *config == "" {
		*config, appDir, err = runtimeConfig(lookup)
		if err != nil {
			fmt.Fprintf(stderr, "sluice-serve: %v\n", err)
			return 2
		}
	}
	if *backend == "memory" {
		*addr = ""
	}
	mode, ok := modes[*modeName]
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "sluice-serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	case *backend != "redis" && *backend != "memory":
		fmt.Fprintf(stderr, "sluice-serve: -backend %q: want redis or memory\n", *backend)
		return 2
	case *backend == "redis" && *addr == "":
		fmt.Fprintln(stderr, "sluice-serve: -redis is empty; give Redis's address, or -backend memory")
		return 2
	case *redisType != "single" && *redisType != "cluster" && *redisType != "sentinel":
		fmt.Fprintf(stderr, "sluice-serve: -redis-type %q: want single, cluster or sentinel\n", *redisType)
		return 2
	case *sockType != "" && *sockType != "tcp" && *sockType != "unix":
		fmt.Fprintf(stderr, "sluice-serve: -redis-socket-type %q: want tcp or unix\n", *sockType)
		return 2
	case !ok:
		fmt.Fprintf(stderr, "sluice-serve: -mode %q: want fail-open, fail-closed or degrade\n", *modeName)
		return 2
	case *clientN != "rueidis" && *clientN != "go-redis":
		fmt.Fprintf(stderr, "sluice-serve: -client %q: want rueidis or go-redis\n", *clientN)
		return 2
	case *timeout <= 0:
		fmt.Fprintln(stderr, "sluice-serve: -timeout must be positive")
		return 2
	case *cache < 0:
		fmt.Fprintf(stderr, "sluice-serve: -local-cache %d: want a number of keys, or 0 for none\n", *cache)
		return 2
	case *cache > 0 && *addr == "":
		fmt.Fprintln(stderr, "sluice-serve: -local-cache caches Redis's denials: it needs -redis")
		return 2
	case *allotAll < 0:
		fmt.Fprintf(stderr, "sluice-serve: -allot-all %d: want a number of requests, or 0 for none\n", *allotAll)
		return 2
	case *poolSize < 1:
		fmt.Fprintf(stderr, "sluice-serve: -redis-pool-size %d: want at least 1\n", *poolSize)
		return 2
	case *maxAge <= 0 || *maxGrace < 0:
		fmt.Fprintln(stderr, "sluice-serve: -grpc-max-connection-age must be positive, and its grace not negative")
		return 2
	}
	for _, w := range env.warnings {
		log.Warn("envoyproxy/ratelimit setting " + w)
	}
	if *addr != "" && *clientN == "rueidis" {
		if _, ok := lookup("REDIS_POOL_SIZE"); ok {
			log.Warn("envoyproxy/ratelimit setting REDIS_POOL_SIZE: not honoured: the rueidis client pipelines on one connection a node (-client go-redis has a pool)")
		}
	}
	if !*grpcTLSOn && (*grpcCert != "" || *grpcKey != "" || *clientCA != "" || *clientSAN != "") {
		log.Warn("the gRPC port's TLS files are not used without -grpc-tls (GRPC_SERVER_USE_TLS=true), as envoyproxy/ratelimit does not use them")
	}
	grpcOpts := []grpc.ServerOption{grpc.KeepaliveParams(keepalive.ServerParameters{
		MaxConnectionAge:      *maxAge,
		MaxConnectionAgeGrace: *maxGrace,
	})}
	if *grpcTLSOn {
		c, err := grpcTLS(*grpcCert, *grpcKey, *clientCA, *clientSAN, log)
		if err != nil {
			fmt.Fprintf(stderr, "sluice-serve: %v\n", err)
			return 2
		}
		grpcOpts = append(grpcOpts, grpc.Creds(credentials.NewTLS(c)))
	}
	grpcNet := "tcp"
	if *grpcUDS != "" {
		grpcNet, *grpcAddr = "unix", *grpcUDS
	}
	var tlsConfig *tls.Config
	if *redisTLS {
		if tlsConfig, err = env.redisTLS(); err != nil {
			fmt.Fprintf(stderr, "sluice-serve: %v\n", err)
			return 2
		}
	}
	rc := redisConfig{
		addr: *addr, typ: *redisType, socket: *sockType, client: *clientN, prefix: *prefix,
		tls: tlsConfig, auth: env.redisAuth, sentinelAuth: env.sentinelAuth, poolSize: *poolSize,
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(serveGOGC)
	}
	var tp trace.TracerProvider = noop.NewTracerProvider()
	if *otlp != "" {
		sdk, err := openTracing(*otlp, *ratio)
		if err != nil {
			fmt.Fprintf(stderr, "sluice-serve: %v\n", err)
			return 2
		}
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := sdk.Shutdown(ctx); err != nil {
				log.Warn("sending the last traces", "err", err)
			}
		}()
		tp = sdk
	}
	limitOpts := limits.Options{MergeDomains: *merge, IgnoreDotFiles: *ignoreDot, AppDirectory: appDir, Allotment: *allotAll}
	// Allotments need the layered store: with -allot-all, or when the
	// configuration at start has a rule with an allotment.
	allot := *allotAll > 0
	if set, err := limits.Load(*config, limitOpts); err == nil && set.Allotted() > 0 {
		allot = true
	}
	allot = allot && *addr != ""
	store, breaker, closeStore, err := openStore(log, rc, mode, *timeout, *inst, *cache, allot, tp)
	if err != nil {
		fmt.Fprintf(stderr, "sluice-serve: %v\n", err)
		return 1
	}
	defer closeStore()
	opts := []serve.Option{serve.WithMaxDescriptors(*maxDsc), serve.WithDescriptorStats(*dstats), serve.WithNearLimitRatio(*near)}
	if *otlp != "" {
		opts = append(opts, serve.WithTracerProvider(tp))
	}
	if *headers {
		opts = append(opts, serve.WithHeaders(*hLimit, *hRemain, *hReset))
	}
	if *shadow {
		opts = append(opts, serve.WithGlobalShadowMode())
	}
	if *exact {
		opts = append(opts, serve.WithExactReset())
	}
	if *unitMult {
		opts = append(opts, serve.WithUnitMultiplier())
	}
	var storeHealthy func() bool
	if *storeHlth && breaker != nil {
		storeHealthy = func() bool { return breaker.State() != policy.Open }
	}
	reloadEvery := *every
	if reloadEvery == 0 {
		reloadEvery = -1
	}
	srv, err := serve.NewServer(serve.Config{
		Store:             store,
		Limits:            *config,
		LimitOptions:      limitOpts,
		Allotments:        allot,
		GRPCAddr:          *grpcAddr,
		GRPCNetwork:       grpcNet,
		HTTPAddr:          *httpAddr,
		APIAddr:           *apiAddr,
		MetricsAddr:       *metrics,
		MetricsPath:       *mpath,
		Reload:            reloadEvery,
		Grace:             *grace,
		Service:           opts,
		GRPC:              grpcOpts,
		HealthyWithConfig: *healthy,
		StoreHealthy:      storeHealthy,
		Logger:            log,
	})
	if err != nil {
		fmt.Fprintf(stderr, "sluice-serve: %v\n", err)
		return 1
	}
	log.Info("serving", "grpc", srv.GRPCAddr(), "api", srv.APIAddr(), "debug", srv.HTTPAddr(), "store", describe(rc), "mode", mode.String(), "config", *config)
	if ready != nil {
		ready(srv)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-reload:
				srv.Reload()
			case <-ctx.Done():
				return
			}
		}
	}()
	err = srv.Serve(ctx)
	<-done
	if err != nil {
		fmt.Fprintf(stderr, "sluice-serve: %v\n", err)
		return 1
	}
	return 0
}

// redisConfig is how to reach Redis.
type redisConfig struct {
	addr         string // "" for memory
	typ          string // single, cluster or sentinel
	socket       string // tcp, unix, or "": inferred from addr
	client       string // rueidis or go-redis
	prefix       string
	tls          *tls.Config
	auth         string // REDIS_AUTH: "user:password" or a password
	sentinelAuth string
	poolSize     int
}

// network is the socket type: as given, else unix for a path.
func (rc redisConfig) network() string {
	if rc.socket != "" {
		return rc.socket
	}
	if strings.HasPrefix(rc.addr, "/") {
		return "unix"
	}
	return "tcp"
}

// openStore opens the store chain: telemetry around a breaker around a
// Redis store (behind a cache of denials, if cache is above 0), or
// telemetry around a memory store when rc.addr is empty; and the breaker
// (nil on memory); with allot, the layered store takes allotments for the
// rules that say so. A Redis that does not answer yet is no reason not to
// serve: the breaker answers in mode until it does, and log says so.
// (go-redis connects on first use; rueidis dials at once, and with
// ForceSingleClient hands back a client that dials again on the next
// command.)
func openStore(log *slog.Logger, rc redisConfig, mode policy.Mode, timeout time.Duration, instances, cache int, allot bool, tp trace.TracerProvider) (core.Store, *policy.Breaker, func(), error) {
	if rc.addr == "" {
		mem, err := memstore.New(memstore.Config{})
		if err != nil {
			return nil, nil, nil, err
		}
		t, err := telemetry.New(mem, telemetry.WithStoreName("memstore"), telemetry.WithTracerProvider(tp))
		if err != nil {
			mem.Close()
			return nil, nil, nil, err
		}
		return t, nil, func() { t.Close() }, nil
	}
	addrs := strings.Split(rc.addr, ",")
	master := ""
	if rc.typ == "sentinel" {
		if len(addrs) < 2 {
			return nil, nil, nil, fmt.Errorf("-redis %s: a Sentinel's is the master's name, then the sentinels' addresses: name,host:port,…", rc.addr)
		}
		master, addrs = addrs[0], addrs[1:]
	}
	user, pass := splitAuth(rc.auth)
	suser, spass := splitAuth(rc.sentinelAuth)
	network := rc.network()
	var (
		remote core.Store
		shut   func()
		err    error
	)
	// The clients' options are the ones docs/redis.md recommends behind a
	// breaker (redisstore.ClientOptions, rueidisstore.ClientOption), with
	// a dial that may take as long as a call: a call that needs a new
	// connection is not cut off before its deadline.
	dialTimeout := max(250*time.Millisecond, timeout)
	if rc.client == "go-redis" {
		// go-redis writes a line to standard error for every call that
		// finds Redis down; the breaker's "redis circuit" lines report
		// the outage once. The logger is the process's, and this program
		// owns the process.
		redis.SetLogger(logging.NewBlacklistLogger([]string{"failed to dial"}))
		opt := redisstore.ClientOptions(addrs, timeout)
		opt.IsClusterMode = rc.typ == "cluster"
		opt.MasterName = master
		opt.Username, opt.Password = user, pass
		opt.SentinelUsername, opt.SentinelPassword = suser, spass
		opt.TLSConfig = rc.tls
		opt.PoolSize = rc.poolSize
		opt.DialTimeout = dialTimeout
		// A dialer of rc's network (a Unix socket, or TCP), whose TLS
		// handshake the call's context bounds.
		dialer := &net.Dialer{Timeout: dialTimeout}
		opt.Dialer = func(ctx context.Context, _, addr string) (net.Conn, error) {
			conn, err := dialer.DialContext(ctx, network, addr)
			if err != nil || rc.tls == nil {
				return conn, err
			}
			t := tls.Client(conn, tlsFor(rc.tls, addr))
			if err := t.HandshakeContext(ctx); err != nil {
				conn.Close()
				return nil, err
			}
			return t, nil
		}
		c := redis.NewUniversalClient(opt)
		shut = func() { c.Close() }
		remote, err = redisstore.New(c, redisstore.Config{Prefix: rc.prefix})
	} else {
		opt := rueidisstore.ClientOption(addrs, timeout)
		opt.Username, opt.Password = user, pass
		opt.TLSConfig = rc.tls
		opt.ForceSingleClient = rc.typ == "single" // one server: a client even while Redis is down
		opt.Dialer.Timeout = dialTimeout
		if master != "" {
			opt.Sentinel = rueidis.SentinelOption{MasterSet: master, Username: suser, Password: spass, TLSConfig: rc.tls}
		}
		if network == "unix" {
			opt.DialCtxFn = func(ctx context.Context, dst string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
				return d.DialContext(ctx, "unix", dst)
			}
		}
		var c rueidis.Client
		c, err = rueidis.NewClient(opt)
		switch {
		case err != nil && c == nil:
			// A Cluster or Sentinel none of whose nodes answers: rueidis
			// has no client to give without them.
			return nil, nil, nil, fmt.Errorf("-redis %s: %w", rc.addr, err)
		case err != nil:
			log.Warn("Redis does not answer yet; decisions follow -mode until it does", "redis", rc.addr, "err", err)
		}
		shut = c.Close
		remote, err = rueidisstore.New(c, rueidisstore.Config{Prefix: rc.prefix})
	}
	if err != nil {
		shut()
		return nil, nil, nil, fmt.Errorf("-redis %s: %w", rc.addr, err)
	}
	if cache > 0 || allot {
		// Below the breaker, so that a cached denial is a success to it,
		// and a key over its limit stays denied while Redis is down.
		// Allotments (stores/layered) are taken for the rules that have
		// one (limits.AllotmentOf); the cache of denials comes with them.
		cfg := layered.Config{Size: cache}
		if allot {
			cfg.Allot = func(req core.Request) int64 { return limits.AllotmentOf(req.Algorithm) }
			// A fixed window's allotment lapses at its window's end, so
			// no window admits more than its rate however long it lives:
			// live up to a minute, so that a key spending a few requests
			// a second takes an allotment a minute, not every second.
			cfg.WindowAllotmentTTL = windowAllotmentTTL
		}
		var l *layered.Store
		if l, err = layered.New(remote, cfg); err != nil {
			remote.Close()
			shut()
			return nil, nil, nil, fmt.Errorf("-local-cache %d: %w", cache, err)
		}
		remote = l
	}
	// degrade decides on a memstore of this process's own while Redis is
	// down; the breaker closes it.
	local, err := memstore.New(memstore.Config{})
	if err != nil {
		remote.Close()
		shut()
		return nil, nil, nil, err
	}
	b, err := policy.NewBreaker(remote, policy.WithMode(mode), policy.WithLocal(local), policy.WithTimeout(timeout), policy.WithInstances(instances), policy.WithName("redis"),
		policy.WithOnChange(func(c policy.Change) {
			if c.Cause != nil {
				log.Warn("redis circuit", "from", c.From.String(), "to", c.To.String(), "cause", c.Cause.Error())
				return
			}
			log.Warn("redis circuit", "from", c.From.String(), "to", c.To.String())
		}))
	if err != nil {
		local.Close()
		remote.Close()
		shut()
		return nil, nil, nil, err
	}
	t, err := telemetry.New(b, telemetry.WithStoreName(rc.client), telemetry.WithTracerProvider(tp))
	if err != nil {
		b.Close()
		shut()
		return nil, nil, nil, err
	}
	return t, b, func() { t.Close(); shut() }, nil
}

// windowAllotmentTTL is how long sluice-serve's allotments under the
// fixed window may be spent after they were taken
// (layered.Config.WindowAllotmentTTL), within their window; a token
// bucket's or GCRA's live for layered.DefaultAllotmentTTL.
const windowAllotmentTTL = time.Minute

// tlsFor returns c for a connection to addr: with its host as the
// server's name, unless c names one.
func tlsFor(c *tls.Config, addr string) *tls.Config {
	if c.ServerName != "" {
		return c
	}
	c = c.Clone()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		c.ServerName = host
	}
	return c
}

func describe(rc redisConfig) string {
	if rc.addr == "" {
		return "memory"
	}
	return rc.client + " " + rc.typ + " " + rc.network() + " " + rc.addr
}
