// Command rlsload sends Envoy rate-limit service requests (RLS v3
// ShouldRateLimit) to any RLS server as fast as a fixed number of
// callers can, and prints what it answered and how fast: decisions per
// second, answers by code, errors, and latency percentiles.
//
// Usage:
//
//	rlsload [-addr 127.0.0.1:8081] [-streams 64] [-conns 4] [-duration 10s] [-warmup 2s]
//	        [-descriptors 1|3] [-domain rlsload] [-keys 1000] [-prefix P]
//	rlsload -print-config [-domain rlsload] [-limit 50] [-unit minute]
//
// Each request is about one of -keys users, named P+"u"+N, chosen by a
// hash of the worker and its count, so every user is sent about as
// often. With -descriptors 1 a request is [{user=U}]; with 3 it is
// [{user=U}] [{tenant=T}] [{user=U}, {path=/api}], with 16 tenants. The
// prefix defaults to one made from the time, so every run starts with
// fresh counters; give the same -prefix to continue where a run left
// off. -print-config prints a configuration in envoyproxy/ratelimit's
// YAML format (which sluice-serve reads too) that limits those
// requests: -limit per -unit per user, twice that per user and path,
// 1,000 times that per tenant.
//
// Connections are plaintext gRPC (HTTP/2 without TLS), spoken by the
// load generator's own client, which cost 6 to 14 µs of CPU a call
// against sluice-serve and envoyproxy/ratelimit on 2 cores (grpc-go's,
// 16 to 32), so that on a shared machine more of it goes to the server
// measured;
// -streams RPCs are kept in flight over -conns connections, each worker
// sending its next request when the last is answered. rlsload exits with status 1 if the server could not be
// reached or an RPC failed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/serve/internal/loadgen"
)

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(loadgen.GCPercent)
	}
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("rlsload", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8081", "the RLS server's gRPC `address`")
	streams := fs.Int("streams", loadgen.DefaultStreams, "RPCs kept in flight")
	conns := fs.Int("conns", loadgen.DefaultConns, "gRPC connections the streams share")
	duration := fs.Duration("duration", 10*time.Second, "how long to measure")
	warmup := fs.Duration("warmup", 2*time.Second, "how long to send before measuring")
	descriptors := fs.Int("descriptors", 1, "descriptors per request: 1 or 3")
	domain := fs.String("domain", "rlsload", "the requests' domain")
	keys := fs.Int("keys", 1000, "distinct users")
	prefix := fs.String("prefix", "", "prefix of the users' and tenants' values (default: from the time, so fresh counters)")
	printConfig := fs.Bool("print-config", false, "print a matching envoyproxy/ratelimit YAML configuration and exit")
	limit := fs.Uint("limit", 50, "with -print-config: requests per unit per user")
	unit := fs.String("unit", "minute", "with -print-config: second, minute, hour or day")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "rlsload: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *printConfig {
		if *limit == 0 || *limit > 4_000_000 {
			fmt.Fprintln(os.Stderr, "rlsload: -limit must be 1 to 4000000 (a tenant's limit is 1,000 times it)")
			return 2
		}
		fmt.Print(loadgen.SampleConfig(*domain, uint32(*limit), *unit, ""))
		return 0
	}
	if *prefix == "" {
		*prefix = strconv.FormatInt(time.Now().UnixMilli(), 36) + "-"
	}
	w, err := loadgen.Keyed(*domain, *prefix, *descriptors, *keys)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rlsload:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	fmt.Printf("rlsload: %s, %d streams over %d connections, %d descriptor(s), %d users (prefix %q), warmup %v, measuring %v\n",
		*addr, *streams, min(*conns, *streams), *descriptors, *keys, *prefix, *warmup, *duration)
	res, err := loadgen.Run(ctx, loadgen.Config{
		Addr:     *addr,
		Streams:  *streams,
		Conns:    *conns,
		Warmup:   *warmup,
		Duration: *duration,
		Requests: w.Requests,
		Prebuilt: []*loadgen.Workload{w},
	})
	if err != nil && res.RPCs == 0 {
		fmt.Fprintln(os.Stderr, "rlsload:", err)
		return 1
	}
	report(res)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rlsload: interrupted:", err)
		return 1
	}
	if res.Errors > 0 {
		fmt.Fprintf(os.Stderr, "rlsload: %d RPCs failed; the first: %v\n", res.Errors, res.FirstError)
		return 1
	}
	return 0
}

func report(res loadgen.Result) {
	fmt.Printf("decisions/s  %.0f  (%d in %v)\n", res.DecisionsPerSec(), res.Decisions(), res.Elapsed.Round(time.Millisecond))
	fmt.Printf("answers      %d OK, %d OVER_LIMIT, %d UNKNOWN; %d errors\n", res.OK, res.OverLimit, res.Unknown, res.Errors)
	for i, n := range res.DescriptorOK {
		fmt.Printf("descriptor %d OK in %d answers\n", i, n)
	}
	fmt.Printf("latency      p50 %v  p99 %v  p99.9 %v  max %v\n", round(res.P50), round(res.P99), round(res.P999), round(res.Max))
}

// round keeps three significant figures or so of a latency.
func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(time.Microsecond)
	default:
		return d.Round(100 * time.Nanosecond)
	}
}
