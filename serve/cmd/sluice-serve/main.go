// Command sluice-serve answers Envoy's rate-limit service API (RLS v3)
// over a sluice store chain, configured as envoyproxy/ratelimit is. It is
// built from this module, which keeps gRPC and Envoy's protos out of the
// library's:
//
//	cd serve && go run ./cmd/sluice-serve -config limits.yaml -redis 127.0.0.1:6379
//
// SIGHUP reloads the configuration; SIGINT and SIGTERM stop the server
// gracefully. See docs/serve.md for the flags, the configuration format
// and how to run it next to Envoy.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	code := runServe(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr, hup, nil)
	signal.Stop(hup)
	stop()
	os.Exit(code)
}
