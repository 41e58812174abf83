// Package adaptive adapts a limit to the health of the downstream it
// protects: the refill rate of a token bucket is itself tuned, falling as
// the downstream's latency rises or its errors grow, and rising again
// while it is healthy.
//
// A [Controller] holds one adapted limit. Callers report every downstream
// call with [Controller.Report] (its latency and whether it succeeded,
// failed, or was refused for overload); reporting takes no lock and
// allocates nothing. Once an interval ([Controller.Run], or
// [Controller.Update] on a clock of your own) a control [Law] turns the
// interval's signals into the next limit: [AIMD] adds a fixed amount while
// the downstream is healthy and multiplies by a factor when a latency
// quantile passes a threshold; [Gradient] compares the short-term latency
// with the long-term one and scales the limit by their ratio, smoothed.
// Every step is capped ([WithMaxStep]) and bounded ([WithBounds]); both
// laws back off on failures ([ErrorRatio]) and on explicit overload.
//
// A sluice.Limiter decides under the adapted limit by following the
// controller, which costs a decision one atomic load:
//
//	ctrl, err := adaptive.New(core.PerSecond(100), adaptive.Gradient())
//	lim, err := sluice.NewLimiter(store, algorithms.TokenBucket, core.PerSecond(100))
//	lim, err = lim.Following(ctrl)
//	go ctrl.Run(ctx)
//	defer ctrl.Close()
//
// A rule of a sluice.Stack, or any request a policy sees, uses it through
// [policy.WithOverride] and [Controller.Override] instead
// (policy.New(store, policy.WithOverride(ctrl.Override))), at the cost of
// the policy's hop.
//
// With [WithShared], the limit lives in a store ([SharedLimit], an
// algorithm with a Go transition and an exact Lua twin), so that every
// instance of a fleet behind one Redis converges on one limit; if the
// store fails, each instance keeps its last limit and goes on alone. The
// guide docs/adaptive.md explains how to choose a law and its parameters,
// and shows how the laws converge on a simulated downstream.
//
// [policy.WithOverride]: https://pkg.go.dev/github.com/sluicehq/sluice/policy#WithOverride
package adaptive
