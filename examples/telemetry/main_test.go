package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/telemetry"
)

const testKey = "alice@example.com"

const redisotelScope = "github.com/redis/go-redis/extra/redisotel"

// TestNesting runs the example's limiter on a Redis server of the test's
// own and checks, from the SDK's span recorder, that each decision's span
// is the handler's child and that every span redisotel opened for the
// decision's Redis commands is the decision's child, within it in time;
// that no span carries the key; and that the decisions were counted.
func TestNesting(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() {
		tp.Shutdown(context.Background())
		mp.Shutdown(context.Background())
	})
	lim, closeAll, err := newLimiter(srv.Addr(), tp, mp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeAll)
	const n = 5
	if err := handle(context.Background(), tp.Tracer("test"), lim, testKey, n); err != nil {
		t.Fatal(err)
	}

	ended := spans.Ended()
	var handler sdktrace.ReadOnlySpan
	decisions := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	var commands, setup []sdktrace.ReadOnlySpan
	for _, s := range ended {
		switch {
		case s.Name() == "GET /api/items":
			handler = s
		case s.Name() == telemetry.SpanName:
			decisions[s.SpanContext().SpanID()] = s
		case s.InstrumentationScope().Name == redisotelScope && scriptCall(s.Name()):
			commands = append(commands, s)
		case s.InstrumentationScope().Name == redisotelScope:
			setup = append(setup, s) // a new connection's dial and handshake
		default:
			t.Errorf("unexpected span %q from %q", s.Name(), s.InstrumentationScope().Name)
		}

		for _, kv := range s.Attributes() {
			if strings.Contains(kv.Value.String(), testKey) {
				t.Errorf("span %q: attribute %s holds the key: %s", s.Name(), kv.Key, kv.Value.String())
			}
		}
	}
	if handler == nil || len(decisions) != n {
		t.Fatalf("spans %v: want the handler's and %d decisions'", spanNames(ended), n)
	}
	withCommand := map[trace.SpanID]bool{}
	for _, c := range commands {
		d, ok := decisions[c.Parent().SpanID()]
		if !ok {
			t.Errorf("redisotel's span %q is not a decision's child", c.Name())
			continue
		}
		withCommand[d.SpanContext().SpanID()] = true
		if c.SpanKind() != trace.SpanKindClient || c.StartTime().Before(d.StartTime()) || c.EndTime().After(d.EndTime()) {
			t.Errorf("redisotel's span %q: kind %v, not within its decision's", c.Name(), c.SpanKind())
		}
		if c.SpanContext().TraceID() != handler.SpanContext().TraceID() {
			t.Errorf("redisotel's span %q is in another trace", c.Name())
		}
	}
	// go-redis dials on a context of its own (redis.dial is a root); the
	// new connection's handshake runs under the command that needed it.
	isCommand := map[trace.SpanID]bool{}
	for _, c := range commands {
		isCommand[c.SpanContext().SpanID()] = true
	}
	for _, s := range setup {
		if s.Parent().IsValid() && !isCommand[s.Parent().SpanID()] {
			t.Errorf("redisotel's span %q is neither a root nor a command's child", s.Name())
		}
	}
	for id, d := range decisions {
		if d.Parent().SpanID() != handler.SpanContext().SpanID() {
			t.Errorf("a decision's span is not the handler's child")
		}
		if !withCommand[id] {
			t.Errorf("a decision's span has no Redis command under it")
		}
		if d.Status().Code != 0 {
			t.Errorf("a decision's span has status %v", d.Status())
		}
	}
	t.Logf("%d spans: %v", len(ended), spanNames(ended))

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	counted := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "ratelimit.decisions" {
				for _, p := range sum.DataPoints {
					r, _ := p.Attributes.Value(telemetry.ResultKey)
					counted[r.AsString()] += p.Value
				}
			}
		}
	}
	if counted["allowed"] != 3 || counted["denied"] != n-3 {
		t.Errorf("ratelimit.decisions by result: %v, want 3 allowed and %d denied", counted, n-3)
	}
}

// TestStack decides a stack of three rules (per user, per tenant, for
// everyone) over the example's chain and checks that each decision is one
// span, the handler's child, with the batch's attributes, and exactly one
// Redis command under it: the rules are decided together, in one script
// call, through the telemetry decorator and the breaker.
func TestStack(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	t.Cleanup(func() {
		tp.Shutdown(context.Background())
		mp.Shutdown(context.Background())
	})
	store, closeAll, err := newStore(srv.Addr(), tp, mp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeAll)
	stack, err := sluice.NewStack(store,
		sluice.Rule{Name: "user", Algorithm: algorithms.TokenBucket, Limit: sluice.PerSecond(1).WithBurst(3)},
		sluice.Rule{Name: "tenant", Algorithm: algorithms.GCRA, Limit: sluice.PerMinute(100)},
		sluice.Rule{Name: "global", Algorithm: algorithms.FixedWindow, Limit: sluice.PerMinute(1000)},
	)
	if err != nil {
		t.Fatal(err)
	}
	const tenantKey = "tenant-acme-corp"
	// Load the script (EVALSHA, NOSCRIPT, EVAL), so that each decision
	// below is one EVALSHA.
	if _, err := stack.Allow(context.Background(), "warm", "warm", "warm"); err != nil {
		t.Fatal(err)
	}
	spans.Reset()
	ctx, handler := tp.Tracer("test").Start(context.Background(), "GET /api/items", trace.WithSpanKind(trace.SpanKindServer))
	const n = 4
	for i := range n {
		v, err := stack.Allow(ctx, testKey, tenantKey, "everyone")
		if err != nil {
			t.Fatal(err)
		}
		if v.Allowed != (i < 3) {
			t.Errorf("decision %d: allowed %v, want %v", i, v.Allowed, i < 3)
		}
	}
	handler.End()

	ended := spans.Ended()
	decisions := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	commands := map[trace.SpanID]int{} // by parent
	for _, s := range ended {
		switch {
		case s.Name() == telemetry.SpanName:
			decisions[s.SpanContext().SpanID()] = s
		case s.InstrumentationScope().Name == redisotelScope && scriptCall(s.Name()):
			commands[s.Parent().SpanID()]++
		}
		for _, kv := range s.Attributes() {
			for _, key := range []string{testKey, tenantKey} {
				if strings.Contains(kv.Value.String(), key) {
					t.Errorf("span %q: attribute %s holds a key: %s", s.Name(), kv.Key, kv.Value.String())
				}
			}
		}
	}
	if len(decisions) != n {
		t.Fatalf("spans %v: want %d decisions'", spanNames(ended), n)
	}
	allowed := 0
	for id, d := range decisions {
		if d.Parent().SpanID() != handler.SpanContext().SpanID() {
			t.Errorf("a decision's span is not the handler's child")
		}
		if commands[id] != 1 {
			t.Errorf("a decision's span has %d Redis script calls under it, want 1", commands[id])
		}
		if d.Status().Code != 0 {
			t.Errorf("a decision's span has status %v", d.Status())
		}
		a := map[attribute.Key]attribute.Value{}
		for _, kv := range d.Attributes() {
			a[kv.Key] = kv.Value
		}
		if a[telemetry.BatchSizeKey] != attribute.IntValue(3) {
			t.Errorf("a decision's span has batch.size %s, want 3", a[telemetry.BatchSizeKey].String())
		}
		if a[telemetry.AllowedKey].AsBool() {
			allowed++
		} else if a[telemetry.AlgorithmKey] != attribute.StringValue("token-bucket/user") || a[telemetry.BindingKey] != attribute.IntValue(0) {
			t.Errorf("the denial's binding rule is %s (%s), want token-bucket/user (0)", a[telemetry.AlgorithmKey].String(), a[telemetry.BindingKey].String())
		}
	}
	if allowed != 3 {
		t.Errorf("%d decisions' spans say allowed, want 3", allowed)
	}
}

func spanNames(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}

// exported is the part of a span, as the stdout exporter writes it, that
// the test reads.
type exported struct {
	Name        string
	SpanContext struct{ TraceID, SpanID string }
	Parent      struct{ SpanID string }
	Attributes  []struct {
		Key   string
		Value struct{ Value any }
	}
	ScopeMetrics []struct {
		Metrics []struct{ Name string }
	}
}

// TestRun runs the program as main does, writing to a buffer, and reads
// back the stdout exporters' output: redisotel's spans are the decisions'
// children there too, the key hash is on every decision's span, the key is
// nowhere, and the metrics follow the spans.
func TestRun(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var out bytes.Buffer
	if err := run(context.Background(), &out, srv.Addr(), testKey, 4); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), testKey) {
		t.Error("the output holds the key")
	}
	dec := json.NewDecoder(&out)
	decisions := map[string]bool{}
	var commandParents []string
	var metrics []string
	for {
		var e exported
		err := dec.Decode(&e)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("decoding the output: %v", err)
		}
		switch {
		case e.Name == telemetry.SpanName:
			decisions[e.SpanContext.SpanID] = true
			hashed := false
			for _, a := range e.Attributes {
				if a.Key == string(telemetry.KeyHashKey) {
					s, _ := a.Value.Value.(string)
					hashed = len(s) == 32
				}
			}
			if !hashed {
				t.Errorf("a decision's span has no key hash: %+v", e.Attributes)
			}
		case scriptCall(e.Name):
			commandParents = append(commandParents, e.Parent.SpanID)
		case len(e.ScopeMetrics) > 0:
			for _, sm := range e.ScopeMetrics {
				for _, m := range sm.Metrics {
					metrics = append(metrics, m.Name)
				}
			}
		}
	}
	if len(decisions) != 4 || len(commandParents) < 4 {
		t.Fatalf("%d decision spans and %d command spans, want 4 and at least 4", len(decisions), len(commandParents))
	}
	for _, p := range commandParents {
		if !decisions[p] {
			t.Errorf("a command's span has parent %s, not a decision", p)
		}
	}
	joined := strings.Join(metrics, " ")
	for _, want := range []string{"ratelimit.decisions", "ratelimit.decision.duration", "ratelimit.breaker.state", "ratelimit.breaker.changes"} {
		if !strings.Contains(joined, want) {
			t.Errorf("metric %s missing from the output (%s)", want, joined)
		}
	}
}

// scriptCall reports whether a redisotel span is a decision's script call.
// redisstore sends decisions in pipelines, which redisotel names by their
// commands: "redis.pipeline evalsha", or "redis.pipeline eval" when Redis
// had to load the script.
func scriptCall(name string) bool {
	return name == "redis.pipeline evalsha" || name == "redis.pipeline eval"
}
