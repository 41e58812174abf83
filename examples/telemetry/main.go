// Command telemetry shows sluice's decisions traced and measured with
// OpenTelemetry, on Redis through go-redis instrumented with redisotel:
//
//	go run . -redis localhost:6379 [-n 5] [-key user:42]
//
// It makes n decisions for one key under a limit of 3 at once and 1 a
// second, inside a span standing in for a request handler, and prints the
// spans and metrics with OpenTelemetry's stdout exporters (JSON, one
// object per span, then the metrics). Each decision's span,
// ratelimit.decide, is the handler's child, and redisotel's span of the
// pipeline redisstore sends it in ("redis.pipeline evalsha")
// is the decision's child. The key appears in no span: sluice records it
// hashed, and redisotel's db.statement, which would quote it, is off.
//
// The chain is the one a service would run: sluice's telemetry decorator
// around policy's circuit breaker (fail-open) around the Redis store.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/stores/redisstore"
	"github.com/sluicehq/sluice/telemetry"
)

func main() {
	addr := flag.String("redis", "", "`address` of the Redis server to keep the limits in (required)")
	n := flag.Int("n", 5, "`decisions` to make")
	key := flag.String("key", "user:42", "the `key` to limit")
	flag.Parse()
	if *addr == "" {
		fmt.Fprintln(os.Stderr, "usage: telemetry -redis host:port [-n 5] [-key user:42]")
		os.Exit(2)
	}
	if err := run(context.Background(), os.Stdout, *addr, *key, *n); err != nil {
		log.Fatal(err)
	}
}

// run makes n decisions for key on the Redis server at addr and writes
// the spans and metrics to w.
func run(ctx context.Context, w io.Writer, addr, key string, n int) error {
	res := resource.NewSchemaless(semconv.ServiceName("sluice-telemetry-example"))
	spans, err := stdouttrace.New(stdouttrace.WithWriter(w))
	if err != nil {
		return err
	}
	// A synchronous processor, so that the output's order is the order in
	// which spans end; a service would batch (sdktrace.WithBatcher).
	tp := sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithSpanProcessor(sdktrace.NewSimpleSpanProcessor(spans)))
	metrics, err := stdoutmetric.New(stdoutmetric.WithWriter(w))
	if err != nil {
		return err
	}
	reader := sdkmetric.NewPeriodicReader(metrics, sdkmetric.WithInterval(time.Hour))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(reader))
	// Shutting the providers down flushes them: the spans, then the
	// metrics, once. It comes before the limiter's Close, which
	// unregisters the breaker's instruments.
	shutdown := func() error {
		return errors.Join(tp.Shutdown(context.Background()), mp.Shutdown(context.Background()))
	}
	// A program installs its providers globally; sluice's decorator and
	// redisotel then need no options to find them.
	otel.SetTracerProvider(tp)
	otel.SetMeterProvider(mp)

	lim, closeAll, err := newLimiter(addr, tp, mp)
	if err != nil {
		return errors.Join(err, shutdown())
	}
	err = handle(ctx, tp.Tracer("example"), lim, key, n)
	err = errors.Join(err, shutdown())
	closeAll()
	return err
}

// newLimiter returns the example's limiter, on Redis at addr, traced with
// tp and measured with mp, and a function that closes what it opened.
func newLimiter(addr string, tp trace.TracerProvider, mp metric.MeterProvider) (*sluice.Limiter, func(), error) {
	store, closeAll, err := newStore(addr, tp, mp)
	if err != nil {
		return nil, nil, err
	}
	lim, err := sluice.NewLimiter(store, algorithms.TokenBucket, sluice.PerSecond(1).WithBurst(3))
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return lim, closeAll, nil
}

// newStore returns the example's chain of stores, on Redis at addr,
// traced with tp and measured with mp, and a function that closes what it
// opened. A sluice.Stack of several rules over it is decided in one span
// and one Redis call.
func newStore(addr string, tp trace.TracerProvider, mp metric.MeterProvider) (sluice.Store, func(), error) {
	client := redis.NewUniversalClient(redisstore.ClientOptions([]string{addr}, 0))
	// db.statement would quote the command, and so the key: keep it off.
	if err := redisotel.InstrumentTracing(client, redisotel.WithTracerProvider(tp), redisotel.WithDBStatement(false)); err != nil {
		client.Close()
		return nil, nil, err
	}
	rs, err := redisstore.New(client, redisstore.Config{Prefix: "sluice-example:"})
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	breaker, err := policy.NewBreaker(rs, policy.WithMode(policy.FailOpen), policy.WithTimeout(250*time.Millisecond)) // generous, for a busy laptop
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	// In a service the secret comes from its secret store, and stays the
	// same across restarts so that one key's spans keep one hash.
	store, err := telemetry.New(breaker,
		telemetry.WithName("api"),
		telemetry.WithKeyHash([]byte("example secret, 16 bytes or more")),
		telemetry.WithTracerProvider(tp),
		telemetry.WithMeterProvider(mp),
	)
	if err != nil {
		breaker.Close()
		client.Close()
		return nil, nil, err
	}
	return store, func() {
		store.Close() // and the breaker and the Redis store under it
		client.Close()
	}, nil
}

// handle makes n decisions for key, inside a span of its own as a request
// handler would.
func handle(ctx context.Context, tracer trace.Tracer, lim *sluice.Limiter, key string, n int) error {
	ctx, span := tracer.Start(ctx, "GET /api/items", trace.WithSpanKind(trace.SpanKindServer))
	defer span.End()
	admitted := 0
	for range n {
		d, err := lim.Allow(ctx, key)
		if err != nil {
			return errors.Join(err, ctx.Err())
		}
		if d.Allowed {
			admitted++
		}
	}
	span.SetAttributes(attribute.Int("example.admitted", admitted))
	return nil
}
