// Command sluice is the sluice command with its server: every subcommand
// of github.com/sluicehq/sluice/cmd/sluice (sim, inspect, bench), and
// serve, which answers Envoy's rate-limit service API (RLS v3) over a
// sluice store chain. It is built from this module, which keeps gRPC and
// Envoy's protos out of the library's:
//
//	cd serve && go run ./cmd/sluice serve -config limits.yaml -redis 127.0.0.1:6379
//
// See docs/serve.md for the flags, the configuration format and how to
// run it next to Envoy.
package main

import (
	"os"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/cli/rediscli"
)

func main() {
	os.Exit(cli.Run(os.Args[1:], os.Stdout, os.Stderr, commands()))
}

// commands are every command of sluice: sim, the Redis commands, and
// serve.
func commands() []cli.Command {
	return cli.Commands(append(rediscli.Commands(), serveCommand)...)
}
