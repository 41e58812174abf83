package grpclimit_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/contrib/grpclimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// gate is a test's control over the handlers behind the interceptors: a
// call whose "x-test" metadata is "block" signals entered and waits for
// leave; one whose "x-test" is "panic" panics. recovered receives what
// reached the outermost interceptor of a panic.
type gate struct {
	entered, leave chan struct{}
	recovered      chan any
}

func newGate() *gate {
	return &gate{entered: make(chan struct{}), leave: make(chan struct{}), recovered: make(chan any, 4)}
}

func (g *gate) act(ctx context.Context) {
	switch v := metadata.ValueFromIncomingContext(ctx, "x-test"); {
	case slices.Equal(v, []string{"block"}):
		g.entered <- struct{}{}
		<-g.leave
	case slices.Equal(v, []string{"panic"}):
		panic("boom")
	}
}

// recover turns a panic that reached it into codes.Internal, as a
// recovery interceptor would; the server would otherwise crash.
func (g *gate) recover(err *error) {
	if p := recover(); p != nil {
		g.recovered <- p
		*err = status.Error(codes.Internal, "panic")
	}
}

// checkRecovered checks that a panic "boom" reached the recovery
// interceptor: it did before the client got its answer.
func (g *gate) checkRecovered(t *testing.T) {
	t.Helper()
	select {
	case p := <-g.recovered:
		if p != "boom" {
			t.Errorf("the panic reached the recovery interceptor as %v, want boom", p)
		}
	default:
		t.Error("no panic reached the recovery interceptor")
	}
}

// serveGated starts a server whose chain is: a recovery interceptor, the
// limiter's, and g's.
func serveGated(t *testing.T, stack *sluice.Stack, g *gate, opts ...grpclimit.Option) healthpb.HealthClient {
	t.Helper()
	in, err := grpclimit.New(stack, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return start(t,
		grpc.ChainUnaryInterceptor(
			func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (_ any, err error) {
				defer g.recover(&err)
				return h(ctx, req)
			},
			in.Unary(),
			func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				g.act(ctx)
				return h(ctx, req)
			}),
		grpc.ChainStreamInterceptor(
			func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
				defer g.recover(&err)
				return h(srv, ss)
			},
			in.Stream(),
			func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
				g.act(ss.Context())
				return h(srv, ss)
			}))
}

// inflight is a stack of a concurrency rule, one call at a time, and an
// hourly rule of 100. The store's clock is stuck: a slot never expires,
// only a release frees it.
func inflight(t *testing.T) *sluice.Stack {
	return newStack(t, newStore(t),
		sluice.Rule{Name: "inflight", Algorithm: algorithms.Concurrency, Limit: sluice.Per(1, time.Minute)},
		sluice.Rule{Name: "hourly", Algorithm: algorithms.TokenBucket, Limit: sluice.PerHour(100)})
}

// checkServed checks the hourly rule of an inflight stack was charged
// served calls, and that the slot is free.
func checkServed(t *testing.T, stack *sluice.Stack, served int64) {
	t.Helper()
	v, err := stack.Peek(context.Background(), "ip:127.0.0.1", "ip:127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := v.Rules()[1].Remaining, 100-served-1; got != want {
		t.Errorf("hourly: peek says %d would remain, want %d (100 less %d served, less one more)", got, want, served)
	}
	if !v.Rules()[0].Allowed {
		t.Errorf("inflight: peek %+v, want the slot free", v.Rules()[0])
	}
}

// TestConcurrencyUnary checks that a unary call holds its slot while its
// handler runs (a second call meanwhile is denied, charging nothing), and
// gives it back when the handler returns and when it panics, the panic
// going on to the interceptor outside.
func TestConcurrencyUnary(t *testing.T) {
	t.Parallel()
	stack, g := inflight(t), newGate()
	c := serveGated(t, stack, g)
	ctx := context.Background()
	done := make(chan error, 1)
	go func() { done <- check(metadata.AppendToOutgoingContext(ctx, "x-test", "block"), c) }()
	<-g.entered
	err := check(ctx, c)
	if got := violated(t, err); !slices.Equal(got, []string{"inflight"}) {
		t.Errorf("while a call is in its handler: %v (violations %q), want a denial by inflight", err, got)
	}
	close(g.leave)
	if err := <-done; err != nil {
		t.Errorf("the blocked call: %v", err)
	}
	if err := check(ctx, c); err != nil {
		t.Errorf("after the blocked call returned: %v, want OK", err)
	}
	if err := check(metadata.AppendToOutgoingContext(ctx, "x-test", "panic"), c); status.Code(err) != codes.Internal {
		t.Errorf("panicking call: %v, want the recovery interceptor's Internal", err)
	}
	g.checkRecovered(t)
	if err := check(ctx, c); err != nil {
		t.Errorf("after the panic: %v, want OK", err)
	}
	checkServed(t, stack, 4)
}

// TestConcurrencyStream checks the same of streams: a stream holds its
// slot until its handler returns (the client cancels it) or panics.
func TestConcurrencyStream(t *testing.T) {
	t.Parallel()
	stack, g := inflight(t), newGate()
	c := serveGated(t, stack, g)
	ctx := context.Background()
	watch, cancel := context.WithCancel(ctx)
	w, err := c.Watch(watch, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatalf("first stream: %v", err)
	}
	// The health service's Watch runs until the client goes: the slot is
	// held meanwhile, for streams and unary calls alike.
	w2, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w2.Recv(); !slices.Equal(violated(t, err), []string{"inflight"}) {
		t.Errorf("second stream while the first is open: %v, want a denial by inflight", err)
	}
	if err := check(ctx, c); !slices.Equal(violated(t, err), []string{"inflight"}) {
		t.Errorf("unary call while the stream is open: %v, want a denial by inflight", err)
	}
	cancel()
	// The server ends the stream's handler once it sees the cancellation,
	// a moment after the client: wait for the slot to come back.
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := check(ctx, c)
		if err == nil {
			break
		}
		if status.Code(err) != codes.ResourceExhausted || time.Now().After(deadline) {
			t.Fatalf("after the stream ended: %v, want OK", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	w3, err := c.Watch(metadata.AppendToOutgoingContext(ctx, "x-test", "panic"), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w3.Recv(); status.Code(err) != codes.Internal {
		t.Errorf("panicking stream: %v, want the recovery interceptor's Internal", err)
	}
	g.checkRecovered(t)
	if err := check(ctx, c); err != nil {
		t.Errorf("after the stream's panic: %v, want OK", err)
	}
	checkServed(t, stack, 4)
}
