package grpclimit_test

import (
	"context"
	"fmt"
	"net"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/contrib/grpclimit"
	"github.com/sluicehq/sluice/stores/memstore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// A gRPC server whose calls are limited to 2 an hour per API key (the
// "x-api-key" metadata) and 1000 an hour for everyone together, charged
// all or nothing. The third call of one key fails with ResourceExhausted,
// naming the rule that denied; the client reads how long to wait from its
// RetryInfo.
func Example() {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	stack, err := sluice.NewStack(store,
		sluice.Rule{Name: "per-key", Algorithm: algorithms.TokenBucket, Limit: sluice.PerHour(2)},
		sluice.Rule{Name: "global", Algorithm: algorithms.TokenBucket, Limit: sluice.PerHour(1000)},
	)
	if err != nil {
		panic(err)
	}
	limit, err := grpclimit.New(stack,
		grpclimit.WithKey("per-key", grpclimit.MetadataKey("x-api-key")),
		grpclimit.WithKey("global", grpclimit.GlobalKey),
	)
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
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "k1")
	for range 3 {
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
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
