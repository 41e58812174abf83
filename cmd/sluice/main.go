package main

import (
	"fmt"
	"io"
	"os"
)

// A command is one of sluice's subcommands. Its run function gets the
// arguments after the command's name and returns the exit status: 0 for
// success, 1 for a failure while running, 2 for bad usage.
type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

// commands lists the subcommands in the order usage prints them.
var commands = []command{
	{"sim", "run a traffic pattern through an algorithm and report what it admits", runSim},
	{"inspect", "print a key's state and TTL in Redis, and the decision a request would get", runInspect},
	{"bench", "measure decisions against your Redis: throughput, latency, calls per decision", runBench},
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole program, minus the process: it dispatches args to a
// command and returns the exit status, so tests call it in-process.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if name == "help" && len(rest) > 0 {
			// "sluice help sim" is "sluice sim -h".
			if c, ok := lookup(rest[0]); ok {
				return c.run([]string{"-h"}, stdout, stderr)
			}
			fmt.Fprintf(stderr, "sluice: unknown command %q\n", rest[0])
			usage(stderr)
			return 2
		}
		usage(stdout)
		return 0
	}
	c, ok := lookup(name)
	if !ok {
		fmt.Fprintf(stderr, "sluice: unknown command %q\n", name)
		usage(stderr)
		return 2
	}
	return c.run(rest, stdout, stderr)
}

func lookup(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func usage(w io.Writer) {
	fmt.Fprint(w, "sluice is a tool for the sluice rate-limiting framework.\n\n")
	fmt.Fprint(w, "Usage:\n\n\tsluice <command> [flags]\n\nThe commands are:\n\n")
	for _, c := range commands {
		fmt.Fprintf(w, "\t%-8s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "\nUse \"sluice help <command>\" or \"sluice <command> -h\" for a command's flags.\n")
}
