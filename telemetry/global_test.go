package telemetry_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/telemetry"
)

// globalChild is set in the environment of the process that runs
// TestGlobalProviders's body: installing the global providers cannot be
// undone, so it happens in a process of its own.
const globalChild = "SLUICE_TELEMETRY_GLOBAL_CHILD"

// TestGlobalProviders checks the defaults: a decorator made without
// providers costs no allocation while the global providers are the API's
// defaults, and once SDKs are installed with otel.SetTracerProvider and
// otel.SetMeterProvider — after the decorator was made — it traces and
// measures into them.
func TestGlobalProviders(t *testing.T) {
	if os.Getenv(globalChild) != "1" {
		t.Parallel()
		cmd := exec.Command(os.Args[0], "-test.run=^TestGlobalProviders$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), globalChild+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestGlobalProviders") {
			t.Fatalf("child process: %v\n%s", err, out)
		}
		return
	}

	s, err := telemetry.New(newMem(t), telemetry.WithName("global"))
	if err != nil {
		t.Fatal(err)
	}
	checkZeroAllocs(t, context.Background(), s)

	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	otel.SetTracerProvider(tp)
	otel.SetMeterProvider(mp)

	ctx, handler := tp.Tracer("caller").Start(context.Background(), "handler")
	_, err = s.Apply(ctx, core.Request{Key: "user:1", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(10)}})
	if err != nil {
		t.Fatal(err)
	}
	handler.End()
	if ended := spans.Ended(); len(ended) != 2 || ended[0].Name() != telemetry.SpanName {
		t.Errorf("after SetTracerProvider: %d spans, want one %s and the caller's", len(ended), telemetry.SpanName)
	}
	h := &harness{reader: reader}
	if got := value(t, h.collect(t), "ratelimit.decisions", telemetry.LimiterKey.String("global")); got != 1 {
		t.Errorf("after SetMeterProvider: ratelimit.decisions = %v, want 1", got)
	}
}
