package loadgen

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestTransportLargeMessages sends requests larger than a frame and
// receives answers larger than the windows the load generator grants, so
// that a request is split into several DATA frames and the answers need
// both the streams' and the connection's windows renewed: every call
// must be answered, whole.
func TestTransportLargeMessages(t *testing.T) {
	t.Parallel()
	const answer = 3 << 20 // 3 stream windows; 6 answers use a connection window
	big := strings.Repeat("v", 40<<10)
	f := &fakeRLS{decide: func(req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
		if got := req.GetDescriptors()[0].GetEntries()[0].GetValue(); got != big {
			return nil, status.Errorf(codes.InvalidArgument, "fake: a value of %d bytes, want %d", len(got), len(big))
		}
		return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK,
			ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "x-pad", Value: strings.Repeat("p", answer)}}}, nil
	}}
	addr := startFake(t, f, grpc.MaxRecvMsgSize(1<<20))
	req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: descs(big)}
	// Run until 6 answers are in; a window not renewed would stall the
	// calls until the timeout.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var sizes []int
	res, err := Run(ctx, Config{
		Addr:     addr,
		Streams:  2,
		Conns:    1,
		Duration: time.Hour,
		Requests: func(w, i int) *rlsv3.RateLimitRequest { return req },
		Observe: func(w, i int, resp *rlsv3.RateLimitResponse) {
			mu.Lock()
			defer mu.Unlock()
			if sizes = append(sizes, len(resp.GetResponseHeadersToAdd()[0].GetValue())); len(sizes) == 6 {
				cancel()
			}
		},
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want it cancelled after 6 answers", err)
	}
	if res.OK < 6 || res.Errors > 2 {
		t.Fatalf("%d OK, %d errors (first: %v): want 6 answered and at most the 2 in flight cancelled", res.OK, res.Errors, res.FirstError)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, n := range sizes {
		if n != answer {
			t.Fatalf("an answer's padding has %d bytes, want %d", n, answer)
		}
	}
}

// TestTransportRequestOverStreamWindow checks that a request no stream
// window can take fails with a clear error, and does not hang.
func TestTransportRequestOverStreamWindow(t *testing.T) {
	t.Parallel()
	// A fixed window of 64 KiB: grpc-go grows none it was given.
	addr := startFake(t, &fakeRLS{decide: byValue}, grpc.InitialWindowSize(64<<10))
	req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: descs(strings.Repeat("v", 100<<10))}
	res, err := Run(t.Context(), Config{
		Addr:     addr,
		Streams:  1,
		Duration: 50 * time.Millisecond,
		Requests: func(w, i int) *rlsv3.RateLimitRequest { return req },
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.OK != 0 || res.Errors == 0 || status.Code(res.FirstError) != codes.ResourceExhausted || !strings.Contains(res.FirstError.Error(), "stream window") {
		t.Errorf("%d OK, %d errors, first %v: want only errors, ResourceExhausted, naming the stream window", res.OK, res.Errors, res.FirstError)
	}
}

// TestTransportFewerStreamsAllowed checks that Run refuses to start when
// the server allows fewer streams on a connection than it would carry.
func TestTransportFewerStreamsAllowed(t *testing.T) {
	t.Parallel()
	addr := startFake(t, &fakeRLS{decide: byValue}, grpc.MaxConcurrentStreams(3))
	_, err := Run(t.Context(), Config{
		Addr:     addr,
		Streams:  8,
		Conns:    2,
		Duration: time.Second,
		Requests: func(w, i int) *rlsv3.RateLimitRequest { return nil },
	})
	if err == nil || !strings.Contains(err.Error(), "allows 3 streams") {
		t.Errorf("Run with 4 streams a connection against a server allowing 3: error = %v, want one naming the 3", err)
	}
}

// TestTransportNotHTTP2 points Run at a server that answers in HTTP/1.1.
func TestTransportNotHTTP2(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
			c.Close()
		}
	})
	_, err = Run(t.Context(), Config{
		Addr:           ln.Addr().String(),
		Duration:       time.Second,
		ConnectTimeout: 5 * time.Second,
		Requests:       func(w, i int) *rlsv3.RateLimitRequest { return nil },
	})
	if err == nil || !strings.Contains(err.Error(), "not ready") {
		t.Errorf("Run against an HTTP/1.1 server: error = %v, want not ready", err)
	}
}

// TestTransportServerStops stops the server once every worker's call is
// in flight: they fail, later calls fail at once, and Run ends at its
// duration with every goroutine gone (the leak check of TestMain).
func TestTransportServerStops(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeRLS{decide: byValue, delay: time.Minute}
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, f)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { srv.Serve(ln) })
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	wg.Go(func() {
		defer srv.Stop()
		for f.inFlight.Load() < 4 && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
	})
	req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: descs("a")}
	res, err := Run(ctx, Config{
		Addr:     ln.Addr().String(),
		Streams:  4,
		Duration: 300 * time.Millisecond,
		Grace:    2 * time.Minute, // so that no call is cancelled: the stop must fail them
		Requests: func(w, i int) *rlsv3.RateLimitRequest { return req },
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.OK != 0 || res.Errors < 4 || status.Code(res.FirstError) != codes.Unavailable {
		t.Errorf("%d OK, %d errors, first %v: want every stuck call failed, Unavailable", res.OK, res.Errors, res.FirstError)
	}
}

// TestRequestHeaders decodes the request headers of a connection's first
// calls as a server whose table holds table bytes would: each call's
// fields must be the same, and later calls' must take a few bytes where
// the server's table holds them.
func TestRequestHeaders(t *testing.T) {
	for _, table := range []uint32{4096, 65536, 0, 100} {
		first, later := requestHeaders("127.0.0.1:8081", table)
		dec := hpack.NewDecoder(table, nil)
		var want []hpack.HeaderField
		for i, block := range [][]byte{first, later, later, later} {
			got, err := dec.DecodeFull(block)
			if err != nil {
				t.Fatalf("table %d, call %d: %v", table, i, err)
			}
			for j := range got {
				got[j].Sensitive = false
			}
			if i == 0 {
				want = got
				if len(want) != 7 || want[2] != (hpack.HeaderField{Name: ":path", Value: "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"}) {
					t.Fatalf("table %d: the first call's headers are %v", table, want)
				}
			} else if !slices.Equal(got, want) {
				t.Errorf("table %d, call %d: headers %v, want %v", table, i, got, want)
			}
		}
		if indexed := len(later) <= len(want); indexed != (table >= 4096) {
			t.Errorf("table %d: later calls' headers take %d bytes", table, len(later))
		}
	}
}
