package algorithms_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
)

// A transition is a pure function of a state: run one directly to see how
// an algorithm decides, here a fixed window across a boundary.
func Example() {
	limit := core.PerSecond(2)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	for _, alg := range []core.Algorithm{algorithms.FixedWindow, algorithms.SlidingWindowLog} {
		var s core.State
		admitted := 0
		for _, at := range []int64{t0 + 999_998, t0 + 999_999, t0 + 1_000_000, t0 + 1_000_001} {
			if alg.Transition(&s, core.Step{Now: at, Cost: 1, Limit: limit}).Allowed {
				admitted++
			}
		}
		fmt.Printf("%s admits %d of 4 requests within 4µs\n", alg.Name(), admitted)
	}
	// Output:
	// fixed-window admits 4 of 4 requests within 4µs
	// sliding-window-log admits 2 of 4 requests within 4µs
}

func ExampleByName() {
	alg, err := algorithms.ByName("gcra")
	fmt.Println(alg.Name(), err)
	_, err = algorithms.ByName("leaky")
	fmt.Println(err != nil)
	// Output:
	// gcra <nil>
	// true
}
