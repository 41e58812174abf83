package cli

import (
	"fmt"
	"io"
)

// Command is one of sluice's subcommands. Run gets the arguments after the
// command's name and returns the exit status: 0 for success, 1 for a
// failure while running, 2 for bad usage.
type Command struct {
	Name    string
	Summary string
	Run     func(args []string, stdout, stderr io.Writer) int
}

// The summaries of the commands that talk to Redis, which usage lists
// in every build and package rediscli runs.
const (
	InspectSummary = "print a key's state and TTL in Redis, and the decision a request would get"
	BenchSummary   = "measure decisions against your Redis: throughput, latency, calls per decision"
)

// Commands returns the subcommands, in the order usage prints them, with
// each of overrides in place of the command of its name. The root
// module's cmd/sluice links no Redis client, so that sim builds quickly:
// its "inspect" and "bench" say that cmd/sluice-redis has them (package
// rediscli, which that build passes), and its "serve" that the
// rate-limit service is a program of its own, sluice-serve, in the
// server's module (github.com/sluicehq/sluice/serve, which keeps gRPC and
// Envoy's protos out of this module).
func Commands(overrides ...Command) []Command {
	cmds := []Command{
		{"sim", "run a traffic pattern through an algorithm and report what it admits", runSim},
		{"inspect", InspectSummary, elsewhere("inspect", redisBuild)},
		{"bench", BenchSummary, elsewhere("bench", redisBuild)},
		{"serve", "serve Envoy's rate-limit API (RLS v3) over any store chain", elsewhere("serve", serverBuild)},
	}
	for _, o := range overrides {
		for i := range cmds {
			if cmds[i].Name == o.Name {
				cmds[i] = o
			}
		}
	}
	return cmds
}

// The builds that have the commands this one lacks: %[1]s is the command.
const (
	redisBuild = `sluice: this build links no Redis client: "sluice %[1]s" talks to your Redis,
and is built from ./cmd/sluice-redis, so that "sluice sim" compiles without
go-redis and rueidis. From a checkout:

	go run ./cmd/sluice-redis %[1]s -h

or: go install github.com/sluicehq/sluice/cmd/sluice-redis@latest
`
	serverBuild = `sluice: this build has no server: the rate-limit service is a program of its
own, sluice-serve, built from the module github.com/sluicehq/sluice/serve,
which keeps gRPC and Envoy's protos out of the library's module. From a
checkout:

	cd serve && go run ./cmd/sluice-serve -config limits.yaml

or: go install github.com/sluicehq/sluice/serve/cmd/sluice-serve@latest
See docs/serve.md.
`
)

// elsewhere is a command of another build: it says which, and fails.
func elsewhere(name, build string) func(args []string, stdout, stderr io.Writer) int {
	return func(args []string, stdout, stderr io.Writer) int {
		fmt.Fprintf(stderr, build, name)
		return 2
	}
}

// Run is the whole program, minus the process: it dispatches args to one
// of cmds and returns the exit status, so tests call it in-process.
func Run(args []string, stdout, stderr io.Writer, cmds []Command) int {
	if len(args) == 0 {
		usage(stderr, cmds)
		return 2
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if name == "help" && len(rest) > 0 {
			// "sluice help sim" is "sluice sim -h".
			if c, ok := lookup(cmds, rest[0]); ok {
				return c.Run([]string{"-h"}, stdout, stderr)
			}
			fmt.Fprintf(stderr, "sluice: unknown command %q\n", rest[0])
			usage(stderr, cmds)
			return 2
		}
		usage(stdout, cmds)
		return 0
	}
	c, ok := lookup(cmds, name)
	if !ok {
		fmt.Fprintf(stderr, "sluice: unknown command %q\n", name)
		usage(stderr, cmds)
		return 2
	}
	return c.Run(rest, stdout, stderr)
}

// run is Run with the root build's commands.
func run(args []string, stdout, stderr io.Writer) int {
	return Run(args, stdout, stderr, Commands())
}

func lookup(cmds []Command, name string) (Command, bool) {
	for _, c := range cmds {
		if c.Name == name {
			return c, true
		}
	}
	return Command{}, false
}

func usage(w io.Writer, cmds []Command) {
	fmt.Fprint(w, "sluice is a tool for the sluice rate-limiting framework.\n\n")
	fmt.Fprint(w, "Usage:\n\n\tsluice <command> [flags]\n\nThe commands are:\n\n")
	for _, c := range cmds {
		fmt.Fprintf(w, "\t%-8s %s\n", c.Name, c.Summary)
	}
	fmt.Fprint(w, "\nUse \"sluice help <command>\" or \"sluice <command> -h\" for a command's flags.\n")
}
