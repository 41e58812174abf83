package cputime_test

import (
	"fmt"

	"github.com/sluicehq/sluice/internal/cputime"
)

// The CPU time a piece of work took: Process before and after.
func Example() {
	before, err := cputime.Process()
	if err != nil {
		fmt.Println(err)
		return
	}
	sum := 0
	for i := range 10_000_000 {
		sum += i
	}
	after, err := cputime.Process()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(sum > 0, after >= before)
	// Output: true true
}
