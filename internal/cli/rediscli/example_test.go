package rediscli_test

import (
	"os"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/cli/rediscli"
)

// Example is the program of cmd/sluice-redis, asked for its commands.
func Example() {
	cli.Run([]string{"help"}, os.Stdout, os.Stderr, cli.Commands(rediscli.Commands()...))
	// Output:
	// sluice is a tool for the sluice rate-limiting framework.
	//
	// Usage:
	//
	//	sluice <command> [flags]
	//
	// The commands are:
	//
	//	sim      run a traffic pattern through an algorithm and report what it admits
	//	inspect  print a key's state and TTL in Redis, and the decision a request would get
	//	bench    measure decisions against your Redis: throughput, latency, calls per decision
	//	serve    serve Envoy's rate-limit API (RLS v3) over any store chain
	//
	// Use "sluice help <command>" or "sluice <command> -h" for a command's flags.
}
