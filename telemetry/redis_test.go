package telemetry_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/redisstore"
	"github.com/sluicehq/sluice/stores/rueidisstore"
	"github.com/sluicehq/sluice/telemetry"
)

var prefixes atomic.Int64

// prefix returns a key prefix no other test uses on the shared server.
func prefix() string { return fmt.Sprintf("tel%d:", prefixes.Add(1)) }

// clientSpans is a go-redis hook that opens a span per command and per
// pipeline, from its context, named as redisotel names them (the root
// module keeps redisotel out; examples/telemetry tests redisotel itself).
// redisstore sends its decisions in pipelines: a lone decision's is
// "redis.pipeline evalsha" (see evalshaSpan).
type clientSpans struct{ tracer trace.Tracer }

func (h clientSpans) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h clientSpans) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		ctx, span := h.tracer.Start(ctx, cmd.FullName(), trace.WithSpanKind(trace.SpanKindClient))
		defer span.End()
		err := next(ctx, cmd)
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		return err
	}
}
func (h clientSpans) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		names := make([]string, len(cmds))
		for i, c := range cmds {
			names[i] = c.FullName()
		}
		ctx, span := h.tracer.Start(ctx, "redis.pipeline "+strings.Join(names, " "), trace.WithSpanKind(trace.SpanKindClient))
		defer span.End()
		return next(ctx, cmds)
	}
}

// evalshaSpan reports whether a client span is a decision's script call:
// rueidis's command, or go-redis's pipeline of it.
func evalshaSpan(name string) bool {
	return name == "evalsha" || name == "redis.pipeline evalsha"
}

// spanClient is a rueidis client that opens a span per command from the
// command's context, as rueidisotel does.
type spanClient struct {
	rueidis.Client
	tracer trace.Tracer
}

func (c spanClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	ctx, span := c.tracer.Start(ctx, strings.ToLower(cmd.Commands()[0]), trace.WithSpanKind(trace.SpanKindClient))
	defer span.End()
	return c.Client.Do(ctx, cmd)
}

// TestRedisSpans decides on real Redis through both Redis stores, under a
// parent span of the caller's, and checks the nesting (caller → decision
// → Redis command), every attribute, and the metrics.
func TestRedisSpans(t *testing.T) {
	t.Parallel()
	addr := redistest.Shared(t).Addr()
	stores := []struct {
		name string
		make func(t *testing.T, h *harness) core.Store
	}{
		{"redisstore", func(t *testing.T, h *harness) core.Store {
			client := redis.NewClient(&redis.Options{Addr: addr})
			t.Cleanup(func() { client.Close() })
			client.AddHook(clientSpans{h.tp.Tracer("redis")})
			s, err := redisstore.New(client, redisstore.Config{Prefix: prefix()})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
		{"rueidisstore", func(t *testing.T, h *harness) core.Store {
			client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(client.Close)
			s, err := rueidisstore.New(spanClient{client, h.tp.Tracer("redis")}, rueidisstore.Config{Prefix: prefix()})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			h := newProviders(t)
			h.wrap(t, nearAt(t, st.make(t, h), 0.1), telemetry.WithName("redis"), telemetry.WithKeyHash([]byte("0123456789abcdef")))
			// Load the script, so that every later decision is one EVALSHA.
			h.store.Apply(context.Background(), core.Request{Key: "warm", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(1)}})
			h.ended()

			limit := core.PerMinute(2)
			for i, want := range []bool{true, true, false} {
				ctx, parent := h.tp.Tracer("caller").Start(context.Background(), "handler")
				req := core.Request{Key: "user:42", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: limit}}
				d, err := h.store.Apply(ctx, req)
				parent.End()
				if err != nil || d.Allowed != want {
					t.Fatalf("step %d: Apply = %+v, %v; want allowed %v", i, d, err, want)
				}
				spans := h.ended()
				byName := map[string]sdktrace.ReadOnlySpan{}
				for _, s := range spans {
					name := s.Name()
					if evalshaSpan(name) {
						name = "evalsha"
					}
					byName[name] = s
				}
				decide, cmd, caller := byName[telemetry.SpanName], byName["evalsha"], byName["handler"]
				if decide == nil || cmd == nil || caller == nil || len(spans) != 3 {
					t.Fatalf("step %d: spans %v, want handler, %s and evalsha", i, names(spans), telemetry.SpanName)
				}
				if decide.Parent().SpanID() != caller.SpanContext().SpanID() {
					t.Errorf("step %d: the decision span is not the caller's child", i)
				}
				if cmd.Parent().SpanID() != decide.SpanContext().SpanID() || cmd.SpanContext().TraceID() != caller.SpanContext().TraceID() {
					t.Errorf("step %d: the Redis command's span is not the decision's child", i)
				}
				if cmd.StartTime().Before(decide.StartTime()) || cmd.EndTime().After(decide.EndTime()) {
					t.Errorf("step %d: the command's span is not within the decision's", i)
				}
				checkDecisionSpan(t, fmt.Sprint("step ", i), decide, decide.Status().Code, codes.Unset)
				want := wantDecision("redis", st.name, req, d)
				want[telemetry.KeyHashKey] = attrs(t, decide)[telemetry.KeyHashKey]
				if len(want[telemetry.KeyHashKey].AsString()) != 32 {
					t.Errorf("step %d: key hash %q", i, want[telemetry.KeyHashKey].AsString())
				}
				checkAttrs(t, fmt.Sprint("step ", i), decide, want)
			}
			// The warming decision counts too: allowed, and near the limit.
			ms := h.collect(t)
			base := []attribute.KeyValue{telemetry.LimiterKey.String("redis"), telemetry.StoreKey.String(st.name), telemetry.AlgorithmKey.String("token-bucket"), telemetry.SourceKey.String("store")}
			if got := value(t, ms, "ratelimit.decisions", append(base, telemetry.ResultKey.String("allowed"))...); got != 3 {
				t.Errorf("allowed decisions = %v, want 3", got)
			}
			if got := value(t, ms, "ratelimit.decisions", append(base, telemetry.ResultKey.String("denied"))...); got != 1 {
				t.Errorf("denied decisions = %v, want 1", got)
			}
			if got := value(t, ms, "ratelimit.near_limit", base[:3]...); got != 2 {
				t.Errorf("near-limit decisions = %v, want 2", got)
			}
		})
	}
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}

// failOpen is a stand-in for the breaker's fail-open policy: when its
// store fails, it admits, and says so.
type failOpen struct{ inner core.Store }

func (f failOpen) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	d, err := f.inner.Apply(ctx, req)
	if err != nil && !errors.Is(err, core.ErrInvalidKey) {
		return core.Decision{Allowed: true, Limit: req.Limit.Burst(), Source: core.SourceFailOpen}, nil
	}
	return d, err
}
func (f failOpen) ApplyAll(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	err := f.inner.ApplyAll(ctx, reqs, out)
	if err != nil && !errors.Is(err, core.ErrInvalidKey) {
		for i, r := range reqs {
			out[i] = core.Decision{Allowed: true, Limit: r.Limit.Burst(), Source: core.SourceFailOpen}
		}
		return nil
	}
	return err
}
func (f failOpen) Reset(ctx context.Context, key string, alg core.Algorithm) error {
	return f.inner.Reset(ctx, key, alg)
}
func (f failOpen) Close() error       { return f.inner.Close() }
func (f failOpen) Unwrap() core.Store { return f.inner }

// TestRedisDown kills a Redis server and checks both views of the outage:
// a decorator on the Redis store records each failure as an error (status
// Error, error.type "connection", the store errors counter), while a
// decorator outside a fail-open policy records its decisions as values
// marked fail-open, not errors.
func TestRedisDown(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: time.Second, DialerRetries: 1})
	t.Cleanup(func() { client.Close() })
	rs, err := redisstore.New(client, redisstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	inner := newHarness(t, rs, telemetry.WithName("inner"))
	outer := newHarness(t, failOpen{inner.store}, telemetry.WithName("outer"))
	req := core.Request{Key: "user:1", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.GCRA, Limit: core.PerSecond(10)}}
	ctx := context.Background()
	if d, err := outer.store.Apply(ctx, req); err != nil || d.Source != core.SourceStore {
		t.Fatalf("Apply while up = %+v, %v", d, err)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	inner.ended()
	outer.ended()
	const n = 3
	for i := range n {
		d, err := outer.store.Apply(ctx, req)
		if err != nil || !d.Allowed || d.Source != core.SourceFailOpen {
			t.Fatalf("Apply %d while down = %+v, %v; want fail-open", i, d, err)
		}
		in, out := inner.onlySpan(t), outer.onlySpan(t)
		checkDecisionSpan(t, "inner", in, in.Status().Code, codes.Error)
		checkDecisionSpan(t, "outer", out, out.Status().Code, codes.Unset)
		if got := attrs(t, in)[telemetry.ErrorTypeKey]; got != attribute.StringValue("connection") {
			t.Errorf("inner error.type = %v, want connection (error %q)", got.String(), in.Status().Description)
		}
		if got := attrs(t, out)[telemetry.SourceKey]; got != attribute.StringValue("fail-open") {
			t.Errorf("outer source = %v, want fail-open", got.String())
		}
		if out.SpanContext().SpanID() != in.Parent().SpanID() {
			t.Errorf("inner span is not the outer's child")
		}
		if in.Status().Description == "" {
			t.Errorf("inner status has no description")
		}
	}
	ims, oms := inner.collect(t), outer.collect(t)
	if got := value(t, ims, "ratelimit.store.errors", telemetry.ErrorTypeKey.String("connection")); got != n {
		t.Errorf("inner store errors = %v, want %d", got, n)
	}
	if got := value(t, ims, "ratelimit.decisions", telemetry.ResultKey.String("error")); got != n {
		t.Errorf("inner error decisions = %v, want %d", got, n)
	}
	if got := value(t, oms, "ratelimit.decisions", telemetry.ResultKey.String("allowed"), telemetry.SourceKey.String("fail-open")); got != n {
		t.Errorf("outer fail-open decisions = %v, want %d", got, n)
	}
	if _, ok := oms["ratelimit.store.errors"]; ok {
		t.Error("outer counted store errors")
	}
}

// TestErrorType classifies real failures: Redis error replies through
// both clients, connection and timeout errors, and sluice's own.
func TestErrorType(t *testing.T) {
	t.Parallel()
	addr := redistest.Shared(t).Addr()
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { client.Close() })
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	noscript := client.Do(ctx, "evalsha", "0000000000000000000000000000000000000000", "0").Err()
	wrongType := client.Do(ctx, "incr", "sluice-telemetry-errortype", "x").Err()
	rNoscript := rc.Do(ctx, rc.B().Evalsha().Sha1("0000000000000000000000000000000000000000").Numkeys(0).Build()).Error()
	_, refused := net.Dial("tcp", "127.0.0.1:1")
	cases := []struct {
		err  error
		want string
	}{
		{nil, ""},
		// A reply as a store marks it is its code; unmarked, its Go type.
		{fmt.Errorf("redisstore: gcra: %w", &core.StoreError{Type: "NOSCRIPT", Unavailable: true, Err: noscript}), "NOSCRIPT"},
		{&core.StoreError{Type: "ERR", Err: wrongType}, "ERR"},
		{fmt.Errorf("rueidisstore: gcra: %w", &core.StoreError{Type: "NOSCRIPT", Unavailable: true, Err: rNoscript}), "NOSCRIPT"},
		{wrongType, "github.com/redis/go-redis/v9/internal/proto.RedisError"},
		{rNoscript, "*rueidis.RedisError"},
		{fmt.Errorf("x: %w", refused), "connection"},
		{&net.OpError{Op: "read", Err: timeoutErr{}}, "timeout"},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), "timeout"},
		{fmt.Errorf("x: %w", context.Canceled), "canceled"},
		{fmt.Errorf("x: %w", core.ErrInvalidCost), "invalid_request"},
		{core.ErrClosed, "closed"},
		{core.ErrUnsupported, "unsupported"},
		{typedErr{}, "quota_exhausted"},
		{fmt.Errorf("x: %w", errors.New("plain")), "*errors.errorString"},
		{errors.Join(fmt.Errorf("request 1: %w", errors.New("plain")), nil), "*errors.errorString"},
		{fmt.Errorf("x: %w", errors.Join(nil, typedErr{}, errors.New("plain"))), "quota_exhausted"},
		{errors.Join(errors.New("plain"), typedErr{}), "quota_exhausted"},
		{errors.Join(fmt.Errorf("request 0: %w", refused), errors.New("plain")), "connection"},
	}
	for _, c := range cases {
		if got := telemetry.ErrorType(c.err); got != c.want {
			t.Errorf("ErrorType(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

type typedErr struct{}

func (typedErr) Error() string     { return "quota exhausted" }
func (typedErr) ErrorType() string { return "quota_exhausted" }
