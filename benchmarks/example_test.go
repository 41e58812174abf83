package benchmarks_test

import (
	"context"
	"fmt"
	"log"

	"github.com/sluicehq/sluice/benchmarks"
)

// Each in-memory contender decides four requests of a new key under 1 a
// second with a burst of 3. The token buckets and GCRA admit the burst;
// sethvargo/go-limiter and ulule/limiter have no burst, and admit the rate
// per interval: 1.
func ExampleMemoryContenders() {
	contenders, err := benchmarks.MemoryContenders(benchmarks.Limit{Rate: 1, Burst: 3})
	if err != nil {
		log.Fatal(err)
	}
	for _, c := range contenders {
		var admitted []bool
		for range 4 {
			ok, err := c.Allow(context.Background(), "user:42")
			if err != nil {
				log.Fatal(err)
			}
			admitted = append(admitted, ok)
		}
		c.Close()
		fmt.Println(c.Name, admitted)
	}
	// Output:
	// sluice-memstore [true true true false]
	// x/time/rate+sync.Map [true true true false]
	// sethvargo/go-limiter [true false false false]
	// throttled-memstore [true true true false]
	// ulule-limiter-memory [true false false false]
}
