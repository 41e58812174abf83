package main

import (
	"context"
	"net"
	"sync"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

// allowAll answers every request OK.
type allowAll struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

func (allowAll) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}, nil
}

func TestRun(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, allowAll{})
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(ln) })
	defer func() {
		srv.Stop()
		wg.Wait()
	}()
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"-addr", ln.Addr().String(), "-duration", "100ms", "-warmup", "0", "-descriptors", "3", "-streams", "4"}, 0},
		{[]string{"-print-config", "-limit", "7"}, 0},
		{[]string{"-descriptors", "2"}, 2},
		{[]string{"-no-such-flag"}, 2},
	} {
		if got := run(tc.args); got != tc.want {
			t.Errorf("run(%q) = %d, want %d", tc.args, got, tc.want)
		}
	}
}
