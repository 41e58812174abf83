package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/serve"
	"github.com/sluicehq/sluice/serve/limits"
	"github.com/sluicehq/sluice/stores/layered"
	"github.com/sluicehq/sluice/stores/memstore"
	"github.com/sluicehq/sluice/stores/redisstore"
	"github.com/sluicehq/sluice/stores/rueidisstore"
	"github.com/sluicehq/sluice/telemetry"
)

// serveCommand is this build's "serve".
var serveCommand = cli.Command{
	Name:    "serve",
	Summary: "serve Envoy's rate-limit API (RLS v3) over any store chain",
	Run: func(args []string, stdout, stderr io.Writer) int {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		return runServe(ctx, args, stdout, stderr, hup, nil)
	},
}

// serveGOGC is the garbage collector's target sluice serve runs with
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

// runServe is sluice serve until ctx ends: each value on reload reloads
// the configuration, and ready, if not nil, is called with the server
// once its ports are open.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer, reload <-chan os.Signal, ready func(*serve.Server)) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		config   = fs.String("config", "", "the limits: a YAML `file` in envoyproxy/ratelimit's format, or a directory of them (required)")
		grpcAddr = fs.String("grpc-addr", "127.0.0.1:8081", "the `address` the RLS gRPC service and gRPC health listen on (:8081 for every interface)")
		httpAddr = fs.String("http-addr", "127.0.0.1:6070", "the debug `address`: /healthz, /metrics, /limits; empty for none")
		addr     = fs.String("redis", "", "the Redis `address`; several, comma-separated, for a Cluster; empty: decide in memory, in this process only")
		cluster  = fs.Bool("cluster", false, "the addresses are a Redis Cluster's")
		clientN  = fs.String("client", "rueidis", "the Redis `client`: rueidis (rueidisstore) or go-redis (redisstore)")
		prefix   = fs.String("prefix", "sluice:", "the Redis key `prefix`")
		modeName = fs.String("mode", "fail-open", "what a decision is while Redis is down: fail-open, fail-closed or degrade")
		timeout  = fs.Duration("timeout", 100*time.Millisecond, "the deadline of each Redis call; past it the breaker answers in -mode")
		inst     = fs.Int("instances", 1, "how many sluice serve processes share the limits (degrade mode decides each under its share)")
		cache    = fs.Int("local-cache", 0, "hold up to this many `keys` over their limit in this process, and deny them without asking Redis until they may pass (as envoyproxy/ratelimit's LOCAL_CACHE_SIZE_IN_BYTES); 0: none")
		headers  = fs.Bool("headers", false, "add RateLimit-Limit, -Remaining and -Reset to every response, as envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED")
		maxDsc   = fs.Int("max-descriptors", serve.DefaultMaxDescriptors, "the most descriptors one request may carry")
		otlp     = fs.String("otlp-endpoint", "", "send traces to the OTLP/gRPC collector at this `URL`: http://host:4317 in plain text, https://host:4317 over TLS; empty: no traces")
		ratio    = fs.Float64("trace-ratio", 0.01, "the share of requests traced when Envoy sent no sampled trace context (0 to 1; with -otlp-endpoint)")
		dstats   = fs.Int("descriptor-stats", serve.DefaultMaxDescriptorStats, "count hits per descriptor, as envoyproxy/ratelimit's stats, for at most this many `names` (the rest together, as _other); 0: none")
		merge    = fs.Bool("merge-domains", false, "let several files declare one domain, as envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG")
		every    = fs.Duration("reload", serve.DefaultReload, "how often to look for a changed configuration; 0: only on SIGHUP")
		grace    = fs.Duration("grace", serve.DefaultGrace, "how long requests in flight may finish when the server stops")
	)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, "Usage: sluice serve -config limits.yaml [flags]\n\n"+
				"Serves Envoy's rate-limit service (envoy.service.ratelimit.v3.RateLimitService)\n"+
				"over a sluice store chain: telemetry, a breaker and a Redis store (see docs/serve.md).\n"+
				"SIGHUP reloads the configuration; SIGINT and SIGTERM stop the server gracefully.\n\nFlags:\n")
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return 2
	}
	mode, ok := modes[*modeName]
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "sluice serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	case *config == "":
		fmt.Fprintln(stderr, "sluice serve: -config is required")
		return 2
	case !ok:
		fmt.Fprintf(stderr, "sluice serve: -mode %q: want fail-open, fail-closed or degrade\n", *modeName)
		return 2
	case *clientN != "rueidis" && *clientN != "go-redis":
		fmt.Fprintf(stderr, "sluice serve: -client %q: want rueidis or go-redis\n", *clientN)
		return 2
	case *timeout <= 0:
		fmt.Fprintln(stderr, "sluice serve: -timeout must be positive")
		return 2
	case *cache < 0:
		fmt.Fprintf(stderr, "sluice serve: -local-cache %d: want a number of keys, or 0 for none\n", *cache)
		return 2
	case *cache > 0 && *addr == "":
		fmt.Fprintln(stderr, "sluice serve: -local-cache caches Redis's denials: it needs -redis")
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(serveGOGC)
	}
	var tp trace.TracerProvider = noop.NewTracerProvider()
	if *otlp != "" {
		sdk, err := openTracing(*otlp, *ratio)
		if err != nil {
			fmt.Fprintf(stderr, "sluice serve: %v\n", err)
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
	store, closeStore, err := openStore(log, *addr, *cluster, *clientN, *prefix, mode, *timeout, *inst, *cache, tp)
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return 1
	}
	defer closeStore()
	opts := []serve.Option{serve.WithMaxDescriptors(*maxDsc), serve.WithDescriptorStats(*dstats)}
	if *otlp != "" {
		opts = append(opts, serve.WithTracerProvider(tp))
	}
	if *headers {
		opts = append(opts, serve.WithHeaders("", "", ""))
	}
	reloadEvery := *every
	if reloadEvery == 0 {
		reloadEvery = -1
	}
	srv, err := serve.NewServer(serve.Config{
		Store:        store,
		Limits:       *config,
		LimitOptions: limits.Options{MergeDomains: *merge},
		GRPCAddr:     *grpcAddr,
		HTTPAddr:     *httpAddr,
		Reload:       reloadEvery,
		Grace:        *grace,
		Service:      opts,
		Logger:       log,
	})
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return 1
	}
	log.Info("serving", "grpc", srv.GRPCAddr(), "http", srv.HTTPAddr(), "store", describe(*addr, *clientN), "mode", mode.String())
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
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return 1
	}
	return 0
}

// openStore opens the store chain: telemetry around a breaker around a
// Redis store (behind a cache of denials, if cache is above 0), or
// telemetry around a memory store when addr is empty. A single Redis
// that does not answer yet is no reason not to serve: the breaker answers
// in mode until it does, and log says so. (go-redis connects on first
// use; rueidis dials at once, and with ForceSingleClient hands back a
// client that dials again on the next command.)
func openStore(log *slog.Logger, addr string, cluster bool, client, prefix string, mode policy.Mode, timeout time.Duration, instances, cache int, tp trace.TracerProvider) (core.Store, func(), error) {
	if addr == "" {
		mem, err := memstore.New(memstore.Config{})
		if err != nil {
			return nil, nil, err
		}
		t, err := telemetry.New(mem, telemetry.WithStoreName("memstore"), telemetry.WithTracerProvider(tp))
		if err != nil {
			mem.Close()
			return nil, nil, err
		}
		return t, func() { t.Close() }, nil
	}
	addrs := strings.Split(addr, ",")
	var (
		remote core.Store
		shut   func()
		err    error
	)
	// The clients' options are the ones docs/redis.md recommends behind a
	// breaker, their backstops kept above -timeout.
	backstop := max(500*time.Millisecond, 2*timeout)
	if client == "go-redis" {
		c := redis.NewUniversalClient(&redis.UniversalOptions{
			Addrs:                 addrs,
			IsClusterMode:         cluster,
			ContextTimeoutEnabled: true, // the breaker's deadline bounds every read and write
			MaxRetries:            -1,   // a failed call is the breaker's business
			DialTimeout:           250 * time.Millisecond,
			DialerRetries:         1,
			ReadTimeout:           backstop, // bounds pipelined batches
			WriteTimeout:          backstop,
			PoolTimeout:           max(time.Second, 2*timeout), // above the deadline
			DisableIdentity:       true,
		})
		shut = func() { c.Close() }
		remote, err = redisstore.New(c, redisstore.Config{Prefix: prefix})
	} else {
		var c rueidis.Client
		c, err = rueidis.NewClient(rueidis.ClientOption{
			InitAddress:       addrs,
			ForceSingleClient: !cluster, // one server: a client even while Redis is down
			DisableCache:      true,
			DisableRetry:      true,
			Dialer:            net.Dialer{Timeout: 250 * time.Millisecond, KeepAlive: time.Second},
			ConnWriteTimeout:  backstop,
			MaxFlushDelay:     20 * time.Microsecond,
			DialCtxFn:         rueidisstore.Dial, // a silent server fails the dial, not hold callers a second
		})
		switch {
		case err != nil && c == nil:
			// A Cluster none of whose nodes answers: rueidis has no
			// client to give without its slots.
			return nil, nil, fmt.Errorf("-redis %s: %w", addr, err)
		case err != nil:
			log.Warn("Redis does not answer yet; decisions follow -mode until it does", "redis", addr, "err", err)
		}
		shut = c.Close
		remote, err = rueidisstore.New(c, rueidisstore.Config{Prefix: prefix})
	}
	if err != nil {
		shut()
		return nil, nil, fmt.Errorf("-redis %s: %w", addr, err)
	}
	if cache > 0 {
		// Below the breaker, so that a cached denial is a success to it,
		// and a key over its limit stays denied while Redis is down.
		var l *layered.Store
		if l, err = layered.New(remote, layered.Config{Size: cache}); err != nil {
			remote.Close()
			shut()
			return nil, nil, fmt.Errorf("-local-cache %d: %w", cache, err)
		}
		remote = l
	}
	// degrade decides on a memstore of this process's own while Redis is
	// down; the breaker closes it.
	local, err := memstore.New(memstore.Config{})
	if err != nil {
		remote.Close()
		shut()
		return nil, nil, err
	}
	b, err := policy.NewBreaker(remote, policy.WithMode(mode), policy.WithLocal(local), policy.WithTimeout(timeout), policy.WithInstances(instances), policy.WithName("redis"))
	if err != nil {
		local.Close()
		remote.Close()
		shut()
		return nil, nil, err
	}
	t, err := telemetry.New(b, telemetry.WithStoreName(client), telemetry.WithTracerProvider(tp))
	if err != nil {
		b.Close()
		shut()
		return nil, nil, err
	}
	return t, func() { t.Close(); shut() }, nil
}

func describe(addr, client string) string {
	if addr == "" {
		return "memory"
	}
	return client + " " + addr
}
