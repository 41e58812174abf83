package grpclimit_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/contrib/grpclimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/stores"
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

func newStack(t testing.TB, s core.Store, rules ...sluice.Rule) *sluice.Stack {
	t.Helper()
	st, err := sluice.NewStack(s, rules...)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// oneRule returns a stack of one rule, "default", over s.
func oneRule(t testing.TB, s core.Store, alg core.Algorithm, l core.Limit) *sluice.Stack {
	t.Helper()
	return newStack(t, s, sluice.Rule{Name: "default", Algorithm: alg, Limit: l})
}

// serve starts a gRPC server with the health service behind an
// interceptor made of stack and opts, on a loopback TCP port, and returns
// a client connected to it.
func serve(t testing.TB, stack *sluice.Stack, opts ...grpclimit.Option) healthpb.HealthClient {
	t.Helper()
	in, err := grpclimit.New(stack, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return start(t, grpc.ChainUnaryInterceptor(in.Unary()), grpc.ChainStreamInterceptor(in.Stream()))
}

// start starts a gRPC server with the health service and opts on a
// loopback TCP port, and returns a client connected to it.
func start(t testing.TB, opts ...grpc.ServerOption) healthpb.HealthClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
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

// violated returns the quota ids of err's QuotaFailure, in order.
func violated(t *testing.T, err error) []string {
	t.Helper()
	_, qf := details(t, err)
	var ids []string
	for _, v := range qf.GetViolations() {
		ids = append(ids, v.GetQuotaId())
	}
	return ids
}

func TestUnaryDenied(t *testing.T) {
	t.Parallel()
	stack := newStack(t, newStore(t), sluice.Rule{Name: "hourly", Algorithm: algorithms.TokenBucket, Limit: core.PerHour(2)})
	c := serve(t, stack)
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
	if msg := status.Convert(err).Message(); msg != `grpclimit: rate limit "hourly" exceeded: retry in 30m0s` {
		t.Errorf("message %q", msg)
	}
	if d, ok := grpclimit.RetryDelay(err); !ok || d != 30*time.Minute {
		t.Errorf("RetryDelay = %v, %v; want 30m, true", d, ok)
	}
}

// TestStreamDenied checks the stream interceptor: a stream is charged
// once, when it starts.
func TestStreamDenied(t *testing.T) {
	t.Parallel()
	c := serve(t, oneRule(t, newStore(t), algorithms.TokenBucket, core.PerHour(1)))
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
	return stores.Func(func(context.Context, core.Request) (core.Decision, error) { return d, err })
}

// TestErrorHandler checks that every failure of the limiter reaches the
// error handler, with its cause, and nothing else does.
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
		{"fail-closed", answering(core.Decision{Source: core.SourceFailClosed}, nil), nil, grpclimit.ErrFailClosed, codes.Unavailable},
		{"fail-open: served, no failure to report", answering(core.Decision{Allowed: true, Source: core.SourceFailOpen}, nil), nil, nil, codes.OK},
		{"invalid cost", answering(core.Decision{Allowed: true}, nil), []grpclimit.Option{grpclimit.WithCost(func(context.Context, string) int64 { return -1 })}, core.ErrInvalidCost, codes.Unavailable},
		{"allowed", answering(core.Decision{Allowed: true, Limit: 10}, nil), nil, nil, codes.OK},
		{"denied", answering(core.Decision{Limit: 10, RetryAfter: time.Second}, nil), nil, nil, codes.ResourceExhausted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var got []error
			opts := append(tc.opts, grpclimit.WithErrorHandler(func(_ context.Context, method string, err error) {
				mu.Lock()
				defer mu.Unlock()
				if method != "/grpc.health.v1.Health/Check" {
					t.Errorf("the error handler was given method %q", method)
				}
				got = append(got, err)
			}))
			stack := oneRule(t, tc.store, algorithms.TokenBucket, core.PerSecond(10))
			if err := check(context.Background(), serve(t, stack, opts...)); status.Code(err) != tc.code {
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

// TestOutcomes checks the status of every outcome, each from a store that
// answers it: the interceptors read the decision's source and nothing
// else.
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
		{"deny list: no RetryInfo", answering(core.Decision{RetryAfter: core.RetryNever, Source: core.SourceDenyList}, nil), nil, codes.ResourceExhausted, -1},
		{"degraded denial", answering(core.Decision{Limit: 5, RetryAfter: time.Second, Source: core.SourceDegraded}, nil), nil, codes.ResourceExhausted, time.Second},
		{"store error", answering(core.Decision{}, down), nil, codes.Unavailable, -1},
		{"fail-closed", answering(core.Decision{RetryAfter: time.Second, Source: core.SourceFailClosed}, nil), nil, codes.Unavailable, -1},
		{"fail-open", answering(core.Decision{Allowed: true, Source: core.SourceFailOpen}, nil), nil, codes.OK, -1},
		{"shadow", answering(core.Decision{Allowed: true, Limit: 10, Source: core.SourceShadow}, nil), nil, codes.OK, -1},
		{"invalid cost", answering(core.Decision{Allowed: true}, nil), []grpclimit.Option{grpclimit.WithCost(func(context.Context, string) int64 { return -1 })}, codes.Unavailable, -1},
		{"no key", answering(core.Decision{Allowed: true}, nil), []grpclimit.Option{grpclimit.WithKeyFunc(grpclimit.MetadataKey("x-api-key"))}, codes.InvalidArgument, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stack := oneRule(t, tc.store, algorithms.TokenBucket, core.PerSecond(10))
			err := check(context.Background(), serve(t, stack, tc.opts...))
			if status.Code(err) != tc.want {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			d, ok := grpclimit.RetryDelay(err)
			if tc.delay < 0 && ok || tc.delay >= 0 && d != tc.delay {
				t.Errorf("RetryDelay = %v, %v; want %v", d, ok, tc.delay)
			}
			if tc.want == codes.ResourceExhausted {
				if got := violated(t, err); !slices.Equal(got, []string{"default"}) {
					t.Errorf("QuotaFailure names %q, want [default]", got)
				}
			}
		})
	}
}

func TestMetadataKey(t *testing.T) {
	t.Parallel()
	c := serve(t, oneRule(t, newStore(t), algorithms.TokenBucket, core.PerHour(1)), grpclimit.WithKeyFunc(grpclimit.MetadataKey("X-API-Key")))
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

// TestQuotaLeak is the bug the stack fixed: a per-minute limit of 10 in
// front of a per-day limit of 1. The first call passes; every later one,
// unary or stream, is denied by the daily rule and charges neither rule,
// so the per-minute rule keeps 9 of its 10.
func TestQuotaLeak(t *testing.T) {
	t.Parallel()
	quotaLeak(t, newStore(t))
}

// quotaLeak runs TestQuotaLeak's calls on store.
func quotaLeak(t *testing.T, store core.Store) {
	stack := newStack(t, store,
		sluice.Rule{Name: "per-minute", Algorithm: algorithms.TokenBucket, Limit: core.PerMinute(10)},
		sluice.Rule{Name: "per-day", Algorithm: algorithms.TokenBucket, Limit: core.PerDay(1)})
	c := serve(t, stack)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	peek := func(step int) {
		t.Helper()
		v, err := stack.Peek(ctx, "ip:127.0.0.1", "ip:127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		// A peek reports the decision a call would get: 9 left is
		// Remaining 8.
		if got := v.Rules()[0].Remaining; got != 8 {
			t.Errorf("step %d: per-minute peek says %d would remain, want 8 (9 left)", step, got)
		}
	}
	if err := check(ctx, c); err != nil {
		t.Fatalf("first call: %v", err)
	}
	peek(0)
	for i := 1; i <= 4; i++ {
		var err error
		if i%2 == 0 {
			err = check(ctx, c)
		} else {
			w, werr := c.Watch(ctx, &healthpb.HealthCheckRequest{})
			if werr != nil {
				t.Fatal(werr)
			}
			_, err = w.Recv()
		}
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("step %d: %v, want ResourceExhausted", i, err)
		}
		if got := violated(t, err); !slices.Equal(got, []string{"per-day"}) {
			t.Errorf("step %d: violations %q, want [per-day]", i, got)
		}
		peek(i)
	}
}

// TestKeyPerRule checks that each rule is charged on its own key (a user
// from metadata, a tenant from metadata, GlobalKey, and the peer for the
// rest) and that the QuotaFailure names every rule that denied, the
// binding one's wait in RetryInfo.
func TestKeyPerRule(t *testing.T) {
	t.Parallel()
	stack := newStack(t, newStore(t),
		sluice.Rule{Name: "user", Algorithm: algorithms.TokenBucket, Limit: core.PerHour(2)},
		sluice.Rule{Name: "tenant", Algorithm: algorithms.SlidingWindowLog, Limit: core.PerHour(3)},
		sluice.Rule{Name: "peer", Algorithm: algorithms.TokenBucket, Limit: core.PerHour(100)},
		sluice.Rule{Name: "global", Algorithm: algorithms.TokenBucket, Limit: core.PerHour(5)})
	c := serve(t, stack,
		grpclimit.WithKey("user", grpclimit.MetadataKey("x-api-key")),
		grpclimit.WithKey("tenant", grpclimit.MetadataKey("x-tenant")),
		grpclimit.WithKey("global", grpclimit.GlobalKey))
	for i, s := range []struct {
		user, tenant string
		violated     []string
		delay        time.Duration
	}{
		{"alice", "acme", nil, 0},
		{"alice", "acme", nil, 0},
		{"alice", "acme", []string{"user"}, 30 * time.Minute},
		{"bob", "acme", nil, 0},
		{"bob", "acme", []string{"tenant"}, time.Hour},
		{"bob", "initech", nil, 0},
		{"carol", "initech", nil, 0},
		{"dave", "globex", []string{"global"}, 12 * time.Minute},
		// All three deny; the tenant's wait (its oldest call leaves the
		// log in an hour) is the longest.
		{"alice", "acme", []string{"user", "tenant", "global"}, time.Hour},
	} {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", s.user, "x-tenant", s.tenant)
		err := check(ctx, c)
		if s.violated == nil {
			if err != nil {
				t.Errorf("step %d (%s@%s): %v, want OK", i, s.user, s.tenant, err)
			}
			continue
		}
		if got := violated(t, err); !slices.Equal(got, s.violated) {
			t.Errorf("step %d (%s@%s): violations %q, want %q", i, s.user, s.tenant, got, s.violated)
		}
		if d, ok := grpclimit.RetryDelay(err); !ok || d != s.delay {
			t.Errorf("step %d (%s@%s): RetryDelay %v, %v; want %v", i, s.user, s.tenant, d, ok, s.delay)
		}
	}
	// The denied calls charged nothing: 5 served, so "peer" has 95 left.
	v, err := stack.Peek(context.Background(), "x-api-key:zed", "x-tenant:zed", "ip:127.0.0.1", "global")
	if err != nil {
		t.Fatal(err)
	}
	if got := v.Rules()[2].Remaining; got != 94 {
		t.Errorf("peer: peek says %d would remain, want 94 (100 less 5 served, less one more)", got)
	}
}

// TestShadowPolicy checks shadow mode as package policy decides it: a
// denied call is served, and the record function sees the denial.
func TestShadowPolicy(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	denials := 0
	shadow, err := policy.New(newStore(t), policy.WithShadow(func(core.Request, core.Decision) {
		mu.Lock()
		defer mu.Unlock()
		denials++
	}))
	if err != nil {
		t.Fatal(err)
	}
	c := serve(t, oneRule(t, shadow, algorithms.TokenBucket, core.PerHour(1)))
	for i := range 3 {
		if err := check(context.Background(), c); err != nil {
			t.Errorf("call %d: %v, want OK", i, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if denials != 2 {
		t.Errorf("the shadow record saw %d denials, want 2", denials)
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
	stack := newStack(t, newStore(t),
		sluice.Rule{Name: "user", Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(1)},
		sluice.Rule{Name: "global", Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(100)})
	for _, tc := range []struct {
		name  string
		stack *sluice.Stack
		opts  []grpclimit.Option
	}{
		{"nil stack", nil, nil},
		{"nil option", stack, []grpclimit.Option{nil}},
		{"key for a rule the stack lacks", stack, []grpclimit.Option{grpclimit.WithKey("tenant", grpclimit.GlobalKey)}},
		{"two keys for one rule", stack, []grpclimit.Option{grpclimit.WithKey("user", grpclimit.GlobalKey), grpclimit.WithKey("user", grpclimit.GlobalKey)}},
		{"nil key function", stack, []grpclimit.Option{grpclimit.WithKey("user", nil)}},
		{"IPv6 /0", stack, []grpclimit.Option{grpclimit.WithIPv6Prefix(0)}},
		{"IPv4 /40", stack, []grpclimit.Option{grpclimit.WithIPv4Prefix(40)}},
	} {
		if _, err := grpclimit.New(tc.stack, tc.opts...); !errors.Is(err, grpclimit.ErrInvalidOption) {
			t.Errorf("%s: New: %v, want an error wrapping ErrInvalidOption", tc.name, err)
		}
	}
	_, err := grpclimit.New(stack, grpclimit.WithKey("tenant", grpclimit.GlobalKey))
	if want := `the stack has no such rule (its rules: "user", "global")`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("unknown rule: %v, want it to say %s", err, want)
	}
}

// TestWithNow checks that WithNow decides each call at the test's clock,
// not the store's (a memstore on the real clock here): stepped by hand,
// the clock alone refills the limit. WithNow(nil) is refused.
func TestWithNow(t *testing.T) {
	t.Parallel()
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	now := t0
	in, err := grpclimit.New(oneRule(t, store, algorithms.TokenBucket, core.PerHour(1)),
		grpclimit.WithKey("default", grpclimit.GlobalKey), grpclimit.WithNow(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	unary := in.Unary()
	info := &grpc.UnaryServerInfo{FullMethod: "/test.Service/Call"}
	served := func(context.Context, any) (any, error) { return "ok", nil }
	for i, step := range []struct {
		at    time.Duration // from t0
		code  codes.Code
		delay time.Duration // RetryInfo's
	}{
		{0, codes.OK, 0},
		{0, codes.ResourceExhausted, time.Hour},
		{time.Hour - time.Second, codes.ResourceExhausted, time.Second},
		{time.Hour, codes.OK, 0},
	} {
		now = t0.Add(step.at)
		_, err := unary(context.Background(), nil, info, served)
		delay, _ := grpclimit.RetryDelay(err)
		if status.Code(err) != step.code || delay != step.delay {
			t.Errorf("step %d: call at %v = %v, retry delay %v; want %v, %v", i, step.at, err, delay, step.code, step.delay)
		}
	}
	if _, err := grpclimit.New(oneRule(t, store, algorithms.TokenBucket, core.PerHour(1)), grpclimit.WithNow(nil)); !errors.Is(err, grpclimit.ErrInvalidOption) {
		t.Errorf("New with WithNow(nil) = %v, want ErrInvalidOption", err)
	}
}
