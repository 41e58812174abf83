package telemetry_test

import (
	"context"
	"fmt"
	"sort"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/stores/memstore"
	"github.com/sluicehq/sluice/telemetry"
)

// A limiter of 2 logins a minute per user, traced and measured. The SDK's
// in-memory recorder and manual reader stand in for an exporter; a program
// would install its providers globally and omit the two With options.
func Example() {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	mem, err := memstore.New(memstore.Config{})
	if err != nil {
		panic(err)
	}
	// The policy marks admissions that leave less than a tenth of the
	// limit; the decorator counts them in ratelimit.near_limit.
	near, err := policy.New(mem, policy.WithNearLimit(0.1, nil))
	if err != nil {
		panic(err)
	}
	store, err := telemetry.New(near,
		telemetry.WithName("login"),
		telemetry.WithKeyHash([]byte("load me from a secret store!")),
		telemetry.WithTracerProvider(tp),
		telemetry.WithMeterProvider(mp),
	)
	if err != nil {
		panic(err)
	}
	defer store.Close() // closes mem too
	limiter, _ := sluice.NewLimiter(store, algorithms.TokenBucket, core.PerMinute(2))

	// A decision's span is a child of the caller's: here a request's.
	ctx, request := tp.Tracer("app").Start(context.Background(), "POST /login")
	for range 3 {
		limiter.Allow(ctx, "alice@example.com")
	}
	request.End()

	for _, s := range spans.Ended() {
		if s.Name() != telemetry.SpanName {
			continue
		}
		a := map[string]string{}
		for _, kv := range s.Attributes() {
			a[string(kv.Key)] = kv.Value.String()
		}
		fmt.Println(s.Name(), s.Status().Code, "allowed="+a["ratelimit.allowed"], "remaining="+a["ratelimit.remaining"],
			"source="+a["ratelimit.source"], "key.hash="+a["ratelimit.key.hash"])
	}

	var rm metricdata.ResourceMetrics
	reader.Collect(ctx, &rm)
	var lines []string
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
			for _, p := range sum.DataPoints {
				line := m.Name
				if result, ok := p.Attributes.Value("ratelimit.result"); ok {
					line += "{result=" + result.AsString() + "}"
				}
				lines = append(lines, fmt.Sprint(line, " ", p.Value))
			}
		}
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// ratelimit.decide Unset allowed=true remaining=1 source=store key.hash=5092fec0daf1eb3bf00cad3541e6bc0d
	// ratelimit.decide Unset allowed=true remaining=0 source=store key.hash=5092fec0daf1eb3bf00cad3541e6bc0d
	// ratelimit.decide Unset allowed=false remaining=0 source=store key.hash=5092fec0daf1eb3bf00cad3541e6bc0d
	// ratelimit.decisions{result=allowed} 2
	// ratelimit.decisions{result=denied} 1
	// ratelimit.near_limit 1
}
