package main

import (
	"os"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/cli/rediscli"
)

func main() {
	os.Exit(cli.Run(os.Args[1:], os.Stdout, os.Stderr, cli.Commands(rediscli.Commands()...)))
}
