package grpclimit_test

import (
	"context"
	"fmt"
	"net"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/contrib/grpclimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores/memstore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// A gRPC server whose calls are limited to 2 an hour per peer address;
// the third call fails with ResourceExhausted, and the client reads how
// long to wait from its RetryInfo.
func Example() {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	limiter, err := core.NewLimiter(store, algorithms.TokenBucket, core.PerHour(2))
	if err != nil {
		panic(err)
	}
	limit, err := grpclimit.New(limiter, grpclimit.WithPolicyName("hourly"))
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(limit.Unary()), grpc.ChainStreamInterceptor(limit.Stream()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go srv.Serve(ln)
	defer srv.Stop()

	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	for range 3 {
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
		fmt.Println(status.Code(err))
		if delay, ok := grpclimit.RetryDelay(err); ok {
			fmt.Println("retry within the hour:", delay > 0)
		}
	}
	// Output:
	// OK
	// OK
	// ResourceExhausted
	// retry within the hour: true
}
