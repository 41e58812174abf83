package grpclimit_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/contrib/grpclimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores/memstore"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// t0 is the instant every test store's clock is stuck at.
var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func newStore(t testing.TB) *memstore.Store {
	t.Helper()
	s, err := memstore.New(memstore.Config{SweepInterval: -1, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newLimiter(t testing.TB, s core.Store, alg core.Algorithm, l core.Limit) *core.Limiter {
	t.Helper()
	lim, err := core.NewLimiter(s, alg, l)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// serve starts a gRPC server with the health service behind an
// interceptor made of lim and opts, on a loopback TCP port, and returns a
// client connected to it.
func serve(t testing.TB, lim *core.Limiter, opts ...grpclimit.Option) healthpb.HealthClient {
	t.Helper()
	in, err := grpclimit.New(lim, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(in.Unary()), grpc.StreamInterceptor(in.Stream()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}

func check(ctx context.Context, c healthpb.HealthClient) error {
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// details returns the RetryInfo and QuotaFailure of err.
func details(t *testing.T, err error) (*errdetails.RetryInfo, *errdetails.QuotaFailure) {
	t.Helper()
	st, _ := status.FromError(err)
	var ri *errdetails.RetryInfo
	var qf *errdetails.QuotaFailure
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			ri = d
		case *errdetails.QuotaFailure:
			qf = d
		case error:
			t.Fatalf("undecodable detail: %v", d)
		}
	}
	return ri, qf
}

func TestUnaryDenied(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, newStore(t), algorithms.TokenBucket, core.PerHour(2))
	c := serve(t, lim, grpclimit.WithPolicyName("hourly"))
	ctx := context.Background()
	for i := range 2 {
		if err := check(ctx, c); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	err := check(ctx, c)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("third call: %v, want ResourceExhausted", err)
	}
	ri, qf := details(t, err)
	if ri == nil || ri.GetRetryDelay().AsDuration() != 30*time.Minute {
		t.Errorf("RetryInfo %v, want a retry delay of 30m", ri)
	}
	if qf == nil || len(qf.GetViolations()) != 1 {
		t.Fatalf("QuotaFailure %v, want one violation", qf)
	}
	v := qf.GetViolations()[0]
	if v.GetSubject() != "policy:hourly" || v.GetQuotaId() != "hourly" || v.GetQuotaValue() != 2 || v.GetDescription() != "2 req/h (burst 2)" {
		t.Errorf("violation %v", v)
	}
	if d, ok := grpclimit.RetryDelay(err); !ok || d != 30*time.Minute {
		t.Errorf("RetryDelay = %v, %v; want 30m, true", d, ok)
	}
}

// TestStreamDenied checks the stream interceptor: a stream is charged
// once, when it starts.
func TestStreamDenied(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, newStore(t), algorithms.TokenBucket, core.PerHour(1))
	c := serve(t, lim)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatalf("first stream: %v", err)
	}
	w2, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w2.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second stream: %v, want ResourceExhausted", err)
	} else if d, ok := grpclimit.RetryDelay(err); !ok || d != time.Hour {
		t.Errorf("RetryDelay = %v, %v; want 1h", d, ok)
	}
	// The unary call shares the key: the budget is spent.
	if err := check(ctx, c); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("unary after the streams: %v, want ResourceExhausted", err)
	}
}

func answering(d core.Decision, err error) core.Store {
	return core.StoreFunc(func(context.Context, core.Request) (core.Decision, error) { return d, err })
}

// TestErrorHandler checks that every failure of the limiter reaches the
// error handler, with its cause, whatever the call is then answered.
func TestErrorHandler(t *testing.T) {
	t.Parallel()
	down := errors.New("connection refused")
	for _, tc := range []struct {
		name  string
		store core.Store
		opts  []grpclimit.Option
		want  error
		code  codes.Code
	}{
		{"store error", answering(core.Decision{}, down), nil, down, codes.Unavailable},
		{"store error, fail open", answering(core.Decision{}, down), []grpclimit.Option{grpclimit.WithFailOpen()}, down, codes.OK},
		{"fail-closed", answering(core.Decision{Source: core.SourceFailClosed}, nil), nil, grpclimit.ErrFailClosed, codes.Unavailable},
		{"invalid cost", answering(core.Decision{Allowed: true}, nil), []grpclimit.Option{grpclimit.WithCost(func(context.Context, string) int64 { return -1 })}, core.ErrInvalidCost, codes.Unavailable},
		{"allowed", answering(core.Decision{Allowed: true, Limit: 10}, nil), nil, nil, codes.OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var got []error
			opts := append(tc.opts, grpclimit.WithErrorHandler(func(_ context.Context, method string, err error) {
				mu.Lock()
				defer mu.Unlock()
				if method == "" {
					t.Error("the error handler was given no method")
				}
				got = append(got, err)
			}))
			lim := newLimiter(t, tc.store, algorithms.TokenBucket, core.PerSecond(10))
			if err := check(context.Background(), serve(t, lim, opts...)); status.Code(err) != tc.code {
				t.Fatalf("got %v, want %v", err, tc.code)
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case tc.want == nil && len(got) != 0:
				t.Errorf("the error handler saw %v on a call that did not fail", got)
			case tc.want != nil && (len(got) != 1 || !errors.Is(got[0], tc.want)):
				t.Errorf("the error handler saw %v, want one error wrapping %v", got, tc.want)
			}
		})
	}
}

func TestOutcomes(t *testing.T) {
	t.Parallel()
	down := errors.New("connection refused")
	for _, tc := range []struct {
		name  string
		store core.Store
		opts  []grpclimit.Option
		want  codes.Code
		delay time.Duration // RetryInfo's, or -1 for none
	}{
		{"allowed", answering(core.Decision{Allowed: true, Limit: 10, Remaining: 9}, nil), nil, codes.OK, -1},
		{"denied, delay rounded up to the ms", answering(core.Decision{Limit: 10, RetryAfter: 1234567 * time.Microsecond}, nil), nil, codes.ResourceExhausted, 1235 * time.Millisecond},
		{"denied without a wait: until the key is full", answering(core.Decision{Limit: 10, ResetAfter: 2500 * time.Millisecond}, nil), nil, codes.ResourceExhausted, 2500 * time.Millisecond},
		{"denied with no wait at all: never retry now", answering(core.Decision{Limit: 10}, nil), nil, codes.ResourceExhausted, time.Millisecond},
		{"unsatisfiable: no RetryInfo", answering(core.Decision{Limit: 10, RetryAfter: core.RetryNever}, nil), nil, codes.ResourceExhausted, -1},
		{"store error", answering(core.Decision{}, down), nil, codes.Unavailable, -1},
		{"store error, fail open", answering(core.Decision{}, down), []grpclimit.Option{grpclimit.WithFailOpen()}, codes.OK, -1},
		{"fail-closed", answering(core.Decision{Source: core.SourceFailClosed}, nil), nil, codes.Unavailable, -1},
		{"fail-closed, fail open", answering(core.Decision{Source: core.SourceFailClosed}, nil), []grpclimit.Option{grpclimit.WithFailOpen()}, codes.Unavailable, -1},
		{"shadow decision", answering(core.Decision{Allowed: true, Source: core.SourceShadow}, nil), nil, codes.OK, -1},
		{"denied in shadow mode", answering(core.Decision{Limit: 10, RetryAfter: time.Second}, nil), []grpclimit.Option{grpclimit.WithShadow()}, codes.OK, -1},
		{"store error in shadow mode", answering(core.Decision{}, down), []grpclimit.Option{grpclimit.WithShadow()}, codes.OK, -1},
		{"invalid cost", answering(core.Decision{Allowed: true}, nil), []grpclimit.Option{grpclimit.WithCost(func(context.Context, string) int64 { return -1 })}, codes.Unavailable, -1},
		{"no key", answering(core.Decision{Allowed: true}, nil), []grpclimit.Option{grpclimit.WithKeyFunc(grpclimit.MetadataKey("x-api-key"))}, codes.InvalidArgument, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lim := newLimiter(t, tc.store, algorithms.TokenBucket, core.PerSecond(10))
			err := check(context.Background(), serve(t, lim, tc.opts...))
			if status.Code(err) != tc.want {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			d, ok := grpclimit.RetryDelay(err)
			if tc.delay < 0 && ok || tc.delay >= 0 && d != tc.delay {
				t.Errorf("RetryDelay = %v, %v; want %v", d, ok, tc.delay)
			}
			if tc.want == codes.ResourceExhausted {
				if _, qf := details(t, err); qf == nil {
					t.Error("no QuotaFailure")
				}
			}
		})
	}
}

func TestMetadataKey(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, newStore(t), algorithms.TokenBucket, core.PerHour(1))
	c := serve(t, lim, grpclimit.WithKeyFunc(grpclimit.MetadataKey("X-API-Key")))
	ctx := context.Background()
	with := func(k string) context.Context { return metadata.AppendToOutgoingContext(ctx, "x-api-key", k) }
	for i, s := range []struct {
		ctx  context.Context
		want codes.Code
	}{
		{with("k1"), codes.OK},
		{with("k1"), codes.ResourceExhausted},
		{with("k2"), codes.OK},
		{ctx, codes.InvalidArgument},
	} {
		if err := check(s.ctx, c); status.Code(err) != s.want {
			t.Errorf("step %d: %v, want %v", i, err, s.want)
		}
	}
}

// TestSeveralLimiters checks that the first denial answers, naming its
// policy.
func TestSeveralLimiters(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	perMin := newLimiter(t, s, algorithms.FixedWindow, core.PerMinute(5))
	perHour := newLimiter(t, s, algorithms.SlidingWindowLog, core.PerHour(2))
	c := serve(t, perMin, grpclimit.WithPolicyName("minute"), grpclimit.WithLimiter("hour", perHour))
	ctx := context.Background()
	check(ctx, c)
	check(ctx, c)
	err := check(ctx, c)
	if _, qf := details(t, err); qf == nil || qf.GetViolations()[0].GetQuotaId() != "hour" {
		t.Errorf("third call: %v, want a denial by hour", err)
	}
}

// peerCtx returns a context whose peer is addr.
func peerCtx(addr string) context.Context {
	return peer.NewContext(context.Background(), &peer.Peer{Addr: net.TCPAddrFromAddrPort(netip.MustParseAddrPort(addr))})
}

func TestPeerKey(t *testing.T) {
	t.Parallel()
	f, err := grpclimit.PeerKey(32, 64)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ addr, want string }{
		{"192.0.2.1:80", "ip:192.0.2.1"},
		{"[::ffff:1.2.3.4]:80", "ip:1.2.3.4"},
		{"[::ffff:5.6.7.8]:80", "ip:5.6.7.8"},
		{"[2001:db8::1]:80", "ip:2001:db8::/64"},
		{"[2001:db8::2]:80", "ip:2001:db8::/64"},
	} {
		if got, err := f(peerCtx(tc.addr), "/m"); err != nil || got != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.addr, got, err, tc.want)
		}
	}
	if _, err := f(context.Background(), "/m"); !errors.Is(err, grpclimit.ErrNoKey) {
		t.Errorf("no peer: %v, want ErrNoKey", err)
	}
	unix := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.UnixAddr{Name: "/tmp/s", Net: "unix"}})
	if _, err := f(unix, "/m"); !errors.Is(err, grpclimit.ErrNoKey) {
		t.Errorf("unix peer: %v, want ErrNoKey", err)
	}
	for _, bits := range [][2]int{{0, 64}, {33, 64}, {32, 0}, {32, 129}} {
		if _, err := grpclimit.PeerKey(bits[0], bits[1]); err == nil {
			t.Errorf("PeerKey(%d, %d) succeeded, want an error", bits[0], bits[1])
		}
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, newStore(t), algorithms.TokenBucket, core.PerSecond(1))
	for i, tc := range []struct {
		lim  *core.Limiter
		opts []grpclimit.Option
	}{
		{nil, nil},
		{lim, []grpclimit.Option{grpclimit.WithLimiter("b", nil)}},
		{lim, []grpclimit.Option{grpclimit.WithPolicyName("")}},
		{lim, []grpclimit.Option{grpclimit.WithLimiter("default", lim)}},
		{lim, []grpclimit.Option{grpclimit.WithIPv6Prefix(0)}},
		{lim, []grpclimit.Option{grpclimit.WithIPv4Prefix(40)}},
	} {
		if _, err := grpclimit.New(tc.lim, tc.opts...); err == nil {
			t.Errorf("case %d: New succeeded, want an error", i)
		}
	}
}
