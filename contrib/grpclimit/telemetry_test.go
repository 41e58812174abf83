package grpclimit_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	otelcodes "go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/contrib/grpclimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/telemetry"
)

// TestServerSpanOfADenial serves the health service behind grpclimit and
// otelgrpc's server instrumentation, both tracing into one recorder,
// until the limit answers ResourceExhausted: the server span of the
// denied call is not an error (otelgrpc counts ResourceExhausted as the
// client's), sluice adds nothing to any server span, and each decision's
// span is the server span's INTERNAL child, a denial's with status Unset
//
func TestServerSpanOfADenial(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	traced, err := telemetry.New(newStore(t), telemetry.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { traced.Close() })
	in, err := grpclimit.New(oneRule(t, traced, algorithms.TokenBucket, core.PerMinute(2)))
	if err != nil {
		t.Fatal(err)
	}
	client := start(t, grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp))), grpc.ChainUnaryInterceptor(in.Unary()))
	var got []codes.Code
	for range 3 {
		got = append(got, status.Code(check(context.Background(), client)))
	}
	if want := []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted}; !slices.Equal(got, want) {
		t.Fatalf("answers %v, want %v", got, want)
	}
	// The server ends a call's span once its reply has gone, which the
	// client may read first: wait for the spans, over a bound no loaded
	// machine nears.
	servers := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	var decisions []sdktrace.ReadOnlySpan
	for wait := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		clear(servers)
		decisions = decisions[:0]
		for _, s := range spans.Ended() {
			if s.SpanKind() == trace.SpanKindServer {
				servers[s.SpanContext().SpanID()] = s
			} else {
				decisions = append(decisions, s)
			}
		}
		if len(servers) >= 3 && len(decisions) >= 3 || time.Now().After(wait) {
			break
		}
	}
	if len(servers) != 3 || len(decisions) != 3 {
		t.Fatalf("%d server spans and %d others, want 3 and 3", len(servers), len(decisions))
	}
	for _, s := range servers {
		if s.Status().Code != otelcodes.Unset {
			t.Errorf("server span %q: status %v, want Unset", s.Name(), s.Status())
		}
		for _, kv := range s.Attributes() {
			if kv.Key == telemetry.AllowedKey {
				t.Errorf("server span %q carries sluice's %s", s.Name(), kv.Key)
			}
		}
	}
	denials := 0
	for _, d := range decisions {
		if d.SpanKind() != trace.SpanKindInternal {
			t.Errorf("decision span %q is %v, want INTERNAL", d.Name(), d.SpanKind())
		}
		if _, ok := servers[d.Parent().SpanID()]; !ok {
			t.Errorf("decision span %q is not a server span's child", d.Name())
		}
		for _, kv := range d.Attributes() {
			if kv.Key == telemetry.AllowedKey && !kv.Value.AsBool() {
				denials++
				if d.Status().Code != otelcodes.Unset {
					t.Errorf("the denial's decision span has status %v, want Unset", d.Status())
				}
			}
		}
	}
	if denials != 1 {
		t.Errorf("%d denied decision spans, want 1", denials)
	}
}
