package compare_test

import (
	"fmt"

	"github.com/sluicehq/sluice/serve/compare"
)

// The commands a server sent Redis for 100 decisions, from two readings
// of INFO commandstats (compare.CommandStats) around them.
func ExampleCommands_PerDecision() {
	before := compare.Commands{"incrby": 40, "expire": 40, "info": 1}
	after := compare.Commands{"incrby": 140, "expire": 140, "info": 2}
	used := after.Sub(before)
	fmt.Println(used.Total(), "commands:", used.PerDecision(100))
	// Output: 200 commands: expire 1.00, incrby 1.00
}
