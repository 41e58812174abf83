package rediscli

import "github.com/sluicehq/sluice/internal/cli"

// Commands returns inspect and bench, to pass to [cli.Commands] in place
// of the placeholders that say where they are.
func Commands() []cli.Command {
	return []cli.Command{
		{Name: "inspect", Summary: cli.InspectSummary, Run: runInspect},
		{Name: "bench", Summary: cli.BenchSummary, Run: runBench},
	}
}
