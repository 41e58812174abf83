package loadgen_test

import (
	"context"
	"fmt"
	"net"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/serve/internal/loadgen"
)

// denyAll is an RLS server that answers every descriptor OVER_LIMIT.
type denyAll struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

func (denyAll) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT}
	for range req.GetDescriptors() {
		resp.Statuses = append(resp.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OVER_LIMIT})
	}
	return resp, nil
}

func Example() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, denyAll{})
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(ln)
	}()
	defer func() {
		srv.Stop()
		<-served
	}()

	// 1,000 users, each request [{user=run1-uN}], from 16 workers.
	w, err := loadgen.Keyed("example", "run1-", 1, 1000)
	if err != nil {
		panic(err)
	}
	res, err := loadgen.Run(context.Background(), loadgen.Config{
		Addr:     ln.Addr().String(),
		Streams:  16,
		Warmup:   50 * time.Millisecond,
		Duration: 200 * time.Millisecond,
		Requests: w.Requests,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("every RPC answered:", res.RPCs > 0 && res.Decisions() == res.RPCs)
	fmt.Println("all denied:", res.OverLimit == res.RPCs, res.DescriptorOK)
	fmt.Println("latency measured:", res.P50 > 0 && res.P50 <= res.P99)
	// Output:
	// every RPC answered: true
	// all denied: true [0]
	// latency measured: true
}
