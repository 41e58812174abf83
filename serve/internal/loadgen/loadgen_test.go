package loadgen

import (
	"context"
	"errors"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// fakeRLS is an in-process RLS server on 127.0.0.1: it answers each
// request with decide's answer, after delay, and counts the requests.
type fakeRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
	decide   func(*rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error)
	delay    time.Duration
	requests atomic.Int64
	inFlight atomic.Int64
}

func (f *fakeRLS) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	f.requests.Add(1)
	f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	if f.delay > 0 {
		select {
		case <-time.After(f.delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return f.decide(req)
}

// startFake serves f, with opts, on a free port of 127.0.0.1 until the
// test ends and returns its address.
func startFake(t *testing.T, f *fakeRLS, opts ...grpc.ServerOption) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	rlsv3.RegisterRateLimitServiceServer(srv, f)
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(ln) })
	t.Cleanup(func() {
		srv.Stop()
		wg.Wait()
	})
	return ln.Addr().String()
}

// byValue answers each descriptor OK unless an entry's value starts with
// "deny", and fails the RPC if one starts with "fail".
func byValue(req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for _, d := range req.GetDescriptors() {
		code := rlsv3.RateLimitResponse_OK
		for _, e := range d.GetEntries() {
			switch {
			case strings.HasPrefix(e.GetValue(), "fail"):
				return nil, status.Error(codes.Unavailable, "fake: told to fail")
			case strings.HasPrefix(e.GetValue(), "deny"):
				code = rlsv3.RateLimitResponse_OVER_LIMIT
				resp.OverallCode = code
			}
		}
		resp.Statuses = append(resp.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{Code: code})
	}
	return resp, nil
}

func TestRunCountsAnswers(t *testing.T) {
	t.Parallel()
	f := &fakeRLS{decide: byValue}
	addr := startFake(t, f)
	// Two descriptors: the first always OK, the second denied for odd i.
	ok := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: descs("a", "b")}
	deny := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: descs("a", "deny")}
	var observed, observedOK atomic.Int64
	var sampled []int64
	res, err := Run(t.Context(), Config{
		Addr:     addr,
		Streams:  8,
		Conns:    2,
		Warmup:   50 * time.Millisecond,
		Duration: 300 * time.Millisecond,
		Requests: func(w, i int) *rlsv3.RateLimitRequest {
			if i%2 == 1 {
				return deny
			}
			return ok
		},
		Observe: func(w, i int, resp *rlsv3.RateLimitResponse) {
			observed.Add(1)
			if resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
				observedOK.Add(1)
			}
		},
		Sample: func(start bool) {
			if start != (len(sampled) == 0) {
				t.Errorf("Sample(%v) called after %d samples", start, len(sampled))
			}
			sampled = append(sampled, f.requests.Load())
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res)
	if res.Errors != 0 || res.Unknown != 0 {
		t.Errorf("Errors, Unknown = %d, %d, want 0, 0 (first error %v)", res.Errors, res.Unknown, res.FirstError)
	}
	if res.RPCs == 0 || res.RPCs != res.OK+res.OverLimit {
		t.Errorf("RPCs = %d, OK+OverLimit = %d+%d; want equal and > 0", res.RPCs, res.OK, res.OverLimit)
	}
	// Each worker alternates, so the two counts differ by at most one
	// per worker.
	if d := res.OK - res.OverLimit; d < -8 || d > 8 {
		t.Errorf("OK - OverLimit = %d, want -8 to 8 (each of 8 workers alternates)", d)
	}
	if len(res.DescriptorOK) != 2 || res.DescriptorOK[0] != res.RPCs || res.DescriptorOK[1] != res.OK {
		t.Errorf("DescriptorOK = %v, want [%d %d]", res.DescriptorOK, res.RPCs, res.OK)
	}
	// Observe sees every answered RPC, warmup included; the server saw
	// exactly those.
	if got, want := observed.Load(), f.requests.Load(); got != want {
		t.Errorf("Observe called %d times, server answered %d", got, want)
	}
	if observed.Load() <= res.RPCs {
		t.Errorf("Observe called %d times, want more than the %d measured RPCs (warmup)", observed.Load(), res.RPCs)
	}
	// No RPC is in flight at either sample: between them the server saw
	// the measured RPCs exactly.
	if len(sampled) != 2 {
		t.Fatalf("Sample called %d times, want 2", len(sampled))
	}
	if d := sampled[1] - sampled[0]; d != res.RPCs {
		t.Errorf("server answered %d RPCs between the samples, want the %d measured", d, res.RPCs)
	}
	if res.DecisionsPerSec() <= 0 || res.Elapsed < 300*time.Millisecond {
		t.Errorf("DecisionsPerSec = %v over %v, want > 0 over at least 300ms", res.DecisionsPerSec(), res.Elapsed)
	}
}

func descs(values ...string) []*rlcommon.RateLimitDescriptor {
	var ds []*rlcommon.RateLimitDescriptor
	for _, v := range values {
		ds = append(ds, &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "k", Value: v}}})
	}
	return ds
}

func TestRunLatency(t *testing.T) {
	t.Parallel()
	const delay = 20 * time.Millisecond
	f := &fakeRLS{decide: byValue, delay: delay}
	addr := startFake(t, f)
	req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: descs("a")}
	res, err := Run(t.Context(), Config{
		Addr:     addr,
		Streams:  4,
		Warmup:   55 * time.Millisecond, // ends while every worker waits
		Duration: 300 * time.Millisecond,
		Requests: func(w, i int) *rlsv3.RateLimitRequest { return req },
		Sample: func(start bool) {
			// The warmup's slow RPCs were answered before the
			// measurement started.
			if n := f.inFlight.Load(); n != 0 {
				t.Errorf("Sample(%v): %d RPCs in flight, want 0", start, n)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res)
	// The server holds every answer for delay; a loaded machine adds to
	// it, never takes away. Every measured RPC began and ended within
	// the measurement.
	if res.P50 < delay {
		t.Errorf("P50 = %v, want at least the server's delay, %v", res.P50, delay)
	}
	if res.Max > res.Elapsed {
		t.Errorf("Max = %v, longer than the measurement, %v", res.Max, res.Elapsed)
	}
	if !(res.P50 <= res.P99 && res.P99 <= res.P999 && res.P999 <= res.Max) {
		t.Errorf("P50 %v, P99 %v, P99.9 %v, Max %v: want non-decreasing", res.P50, res.P99, res.P999, res.Max)
	}
	// 4 workers, each waiting delay per RPC, one RPC after another
	// within the measurement: at most 4 × Elapsed / delay (a stall that
	// makes the measurement longer lets them send more).
	if most := 4 * int64(res.Elapsed/delay); res.RPCs < 4 || res.RPCs > most {
		t.Errorf("RPCs = %d over %v, want 4 to %d for 4 closed-loop workers", res.RPCs, res.Elapsed, most)
	}
}

func TestRunErrors(t *testing.T) {
	t.Parallel()
	addr := startFake(t, &fakeRLS{decide: byValue})
	good := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: descs("a")}
	bad := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: descs("fail")}
	res, err := Run(t.Context(), Config{
		Addr:     addr,
		Streams:  4,
		Duration: 200 * time.Millisecond,
		Requests: func(w, i int) *rlsv3.RateLimitRequest {
			if i%4 == 0 {
				return bad
			}
			return good
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors == 0 || res.OK == 0 || res.RPCs != res.OK+res.Errors {
		t.Errorf("RPCs %d, OK %d, Errors %d: want both kinds, adding up", res.RPCs, res.OK, res.Errors)
	}
	if status.Code(res.FirstError) != codes.Unavailable {
		t.Errorf("FirstError = %v, want the fake's Unavailable", res.FirstError)
	}
	// Failed RPCs have no latency: the histogram holds the answers only.
	if got := res.hist.total; got != uint64(res.Decisions()) {
		t.Errorf("histogram holds %d latencies, want %d (the answered RPCs)", got, res.Decisions())
	}
}

func TestRunGraceCancelsStuckRPCs(t *testing.T) {
	t.Parallel()
	// The server answers after a minute; the grace is 100ms.
	addr := startFake(t, &fakeRLS{decide: byValue, delay: time.Minute})
	req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: descs("a")}
	start := time.Now()
	res, err := Run(t.Context(), Config{
		Addr:     addr,
		Streams:  3,
		Duration: 50 * time.Millisecond,
		Grace:    100 * time.Millisecond,
		Requests: func(w, i int) *rlsv3.RateLimitRequest { return req },
	})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("Run took %v, want about 150ms", took)
	}
	if res.RPCs != 3 || res.Errors != 3 {
		t.Errorf("RPCs, Errors = %d, %d, want 3, 3 (one stuck RPC per worker, cancelled)", res.RPCs, res.Errors)
	}
}

func TestRunContextCancelled(t *testing.T) {
	t.Parallel()
	addr := startFake(t, &fakeRLS{decide: byValue})
	req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: descs("a")}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	res, err := Run(ctx, Config{
		Addr:     addr,
		Streams:  4,
		Duration: time.Hour,
		Requests: func(w, i int) *rlsv3.RateLimitRequest { return req },
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Run(ctx with 200ms deadline, Duration 1h) error = %v, want DeadlineExceeded", err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("Run took %v after its context ended", took)
	}
	if res.RPCs != res.OK+res.Errors {
		t.Errorf("result so far: %d RPCs, %d OK, %d errors; want them to add up", res.RPCs, res.OK, res.Errors)
	}
}

// TestRunCancelledConnecting ends Run's context while its connection
// waits for a server that accepts and never answers: Run returns the
// context's error, not its own connect timeout's.
func TestRunCancelledConnecting(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan []net.Conn)
	go func() {
		var conns []net.Conn
		for {
			c, err := ln.Accept()
			if err != nil {
				accepted <- conns
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for _, c := range <-accepted {
			c.Close()
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err = Run(ctx, Config{
		Addr:           ln.Addr().String(),
		Duration:       time.Hour,
		ConnectTimeout: time.Hour,
		Requests:       func(w, i int) *rlsv3.RateLimitRequest { return nil },
	})
	if !errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "not ready") {
		t.Errorf("Run(ctx with 100ms deadline) against a server that never answers: error = %v, want the context's DeadlineExceeded", err)
	}
}

func TestRunUnreachable(t *testing.T) {
	t.Parallel()
	// A port that was free a moment ago, and nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = Run(t.Context(), Config{
		Addr:           addr,
		Duration:       time.Second,
		ConnectTimeout: 300 * time.Millisecond,
		Requests:       func(w, i int) *rlsv3.RateLimitRequest { return nil },
	})
	if err == nil || !strings.Contains(err.Error(), "not ready") {
		t.Errorf("Run against a closed port: error = %v, want not ready", err)
	}
}

func TestRunInvalidConfig(t *testing.T) {
	t.Parallel()
	req := func(w, i int) *rlsv3.RateLimitRequest { return nil }
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"no addr", Config{Duration: time.Second, Requests: req}},
		{"no requests", Config{Addr: "127.0.0.1:1", Duration: time.Second}},
		{"no duration", Config{Addr: "127.0.0.1:1", Requests: req}},
		{"negative streams", Config{Addr: "127.0.0.1:1", Duration: time.Second, Requests: req, Streams: -1}},
	} {
		if _, err := Run(t.Context(), tc.cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: Run error = %v, want ErrConfig", tc.name, err)
		}
	}
}

// TestRunLeavesNoGoroutine checks that Run's workers and connections are
// gone when it returns.
func TestRunLeavesNoGoroutine(t *testing.T) {
	addr := startFake(t, &fakeRLS{decide: byValue})
	req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: descs("a")}
	before := runtime.NumGoroutine()
	if _, err := Run(t.Context(), Config{
		Addr:     addr,
		Streams:  32,
		Duration: 100 * time.Millisecond,
		Requests: func(w, i int) *rlsv3.RateLimitRequest { return req },
	}); err != nil {
		t.Fatal(err)
	}
	// A closed connection's goroutines end a moment after Close.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines before Run, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

func TestHistogramBuckets(t *testing.T) {
	t.Parallel()
	// Every value lies in its bucket, buckets are contiguous, and a
	// bucket above 64 is at most 1/32 of its lower bound wide.
	prevHi := uint64(0)
	for i := range nBuckets {
		lo, hi := bucketBounds(i)
		if i > 0 && lo != prevHi+1 {
			t.Fatalf("bucket %d starts at %d, want %d", i, lo, prevHi+1)
		}
		if bucketOf(lo) != i || bucketOf(hi) != i {
			t.Fatalf("bucket %d = [%d, %d], but bucketOf gives %d and %d", i, lo, hi, bucketOf(lo), bucketOf(hi))
		}
		if lo >= 64 && float64(hi-lo+1) > float64(lo)/32 {
			t.Fatalf("bucket %d = [%d, %d] is wider than 1/32 of %d", i, lo, hi, lo)
		}
		prevHi = hi
	}
	if prevHi != ^uint64(0) {
		t.Errorf("last bucket ends at %d, want the largest uint64", prevHi)
	}
}

func TestHistogramQuantile(t *testing.T) {
	t.Parallel()
	var h histogram
	// 1..1000 microseconds, once each.
	for v := 1; v <= 1000; v++ {
		h.record(time.Duration(v) * time.Microsecond)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{
		{0, time.Microsecond},
		{0.5, 500 * time.Microsecond},
		{0.99, 990 * time.Microsecond},
		{0.999, 999 * time.Microsecond},
		{1, 1000 * time.Microsecond},
	} {
		got := h.quantile(tc.q)
		if d := got - tc.want; d < -tc.want/60 || d > tc.want/60 {
			t.Errorf("quantile(%v) = %v, want %v within 1/60", tc.q, got, tc.want)
		}
	}
	var empty histogram
	if got := empty.quantile(0.5); got != 0 {
		t.Errorf("empty quantile(0.5) = %v, want 0", got)
	}
}

func TestKeyed(t *testing.T) {
	t.Parallel()
	w, err := Keyed("dom", "r1-", 3, 100)
	if err != nil {
		t.Fatal(err)
	}
	req := w.Request(17)
	got := describe(req)
	want := "dom [user=r1-u17] [tenant=r1-t1] [user=r1-u17 path=/api]"
	if got != want {
		t.Errorf("Request(17) = %s, want %s", got, want)
	}
	// Every key is visited, about equally often.
	seen := make([]int, w.Keys())
	for worker := range 8 {
		for i := range 10000 {
			seen[w.Key(worker, i)]++
		}
	}
	for k, n := range seen {
		if n < 500 || n > 1100 {
			t.Errorf("key %d sent %d times in 80000 over 100 keys, want about 800", k, n)
		}
	}
	if _, err := Keyed("dom", "", 2, 10); !errors.Is(err, ErrConfig) {
		t.Errorf("Keyed(2 descriptors) error = %v, want ErrConfig", err)
	}
}

// describe prints a request as "domain [k=v k=v] [k=v]".
func describe(req *rlsv3.RateLimitRequest) string {
	var b strings.Builder
	b.WriteString(req.GetDomain())
	for _, d := range req.GetDescriptors() {
		b.WriteString(" [")
		for j, e := range d.GetEntries() {
			if j > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(e.GetKey() + "=" + e.GetValue())
		}
		b.WriteByte(']')
	}
	return b.String()
}

func TestSampleConfig(t *testing.T) {
	t.Parallel()
	got := SampleConfig("dom", 50, "minute", "algorithm: token-bucket")
	want := `domain: dom
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 50
      algorithm: token-bucket
    descriptors:
      - key: path
        rate_limit:
          unit: minute
          requests_per_unit: 100
          algorithm: token-bucket
  - key: tenant
    rate_limit:
      unit: minute
      requests_per_unit: 50000
      algorithm: token-bucket
`
	if got != want {
		t.Errorf("SampleConfig =\n%s\nwant\n%s", got, want)
	}
}
