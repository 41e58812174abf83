package core_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
)

// A Level is exact: Units/PerToken tokens.
func ExampleLevel() {
	l := core.Level{Units: -3, PerToken: 8}
	fmt.Println(l.Tokens(), l, l.Known(), core.Level{}.Known())
	// Output: -0.375 -0.375 true false
}

// Run is what a store of your own runs under its lock for each request:
// the algorithm's transition, the decision's instant, and partial
// admissions.
func ExampleRun() {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var state core.State // the key's state, which a store keeps
	req := core.Request{Key: "k", Cost: 3, Op: core.OpAtMost, Terms: &core.Terms{Algorithm: algorithms.FixedWindow, Limit: core.PerMinute(5), Now: t0}}
	for range 2 {
		d := core.Run(&state, &req, 0) // 0: the store's clock, unused with a Now
		fmt.Println(d.Allowed, d.Admitted, d.Level, d.At.Format(time.TimeOnly))
	}
	// Output:
	// true 3 2 00:00:00
	// true 2 0 00:00:00
}

// RunAll decides a batch together: a batch of partial admissions charges
// every request the most all of them admit.
func ExampleRunAll() {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	states := make([]core.State, 2)
	reqs := []core.Request{
		{Key: "u", Cost: 8, Op: core.OpAtMost, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(10), Now: t0}},
		{Key: "t", Cost: 8, Op: core.OpAtMost, Terms: &core.Terms{Algorithm: algorithms.FixedWindow, Limit: core.PerSecond(5), Now: t0}},
	}
	out := make([]core.Decision, 2)
	all := core.RunAll(states, reqs, 0, out)
	fmt.Println(all, out[0].Admitted, out[0].Level, out[1].Admitted, out[1].Level)
	// Output: true 5 5 5 0
}

// AtMost is the cost a partial admission charges: what fits, up to the
// most asked for, or 1, which the key then denies.
func ExampleAtMost() {
	fmt.Println(core.AtMost(7, 3), core.AtMost(2, 3), core.AtMost(0, 3))
	// Output: 3 2 1
}

// A decorator that answers without its store (an outage policy, a list)
// stamps its answer with the request's instant.
func ExampleRequest_Answer() {
	req := core.Request{Key: "k", Cost: 4, Op: core.OpAtMost, Terms: &core.Terms{Now: time.Date(2030, 1, 1, 0, 0, 0, 1500, time.UTC)}}
	d := req.Answer(core.Decision{Allowed: true, Source: core.SourceFailOpen})
	fmt.Println(d.Admitted, d.At.Format(time.RFC3339Nano), d.Source)
	// Output: 4 2030-01-01T00:00:00.000001Z fail-open
}
