// Package sluice holds what a program holds to limit rates: a [Limiter]
// (one algorithm and one limit over many keys) or a [Stack] (several
// rules charged together), over a store. The contracts that stores and
// algorithms implement are in package core, and the algorithms and
// stores in packages of their own:
//
//	store, err := memstore.New(memstore.Config{})
//	...
//	limiter, err := sluice.NewLimiter(store, algorithms.TokenBucket, sluice.PerSecond(10).WithBurst(50))
//	...
//	d, err := limiter.Allow(ctx, "user:42")
//
// A [Limiter] applies one algorithm and one [Limit] to many keys:
// [Limiter.Allow] and [Limiter.AllowN] charge a key if the limit admits
// it now, [Limiter.AllowAtMost] charges as much of a cost as fits,
// [Limiter.Peek] looks without charging, [Limiter.Level] reads what a key
// holds, exactly ([Level], x/time/rate's Tokens), [Limiter.Wait] and
// [Limiter.Reserve] queue a caller until its turn, [Limiter.Acquire]
// takes a concurrency slot that [Lease.Release] gives back, and
// [Limiter.Reset] forgets a key.
//
// A limiter decides on its store's clock (the Redis server's, for the
// Redis stores). [Limiter.At] returns one that decides at an instant of
// your own, as x/time/rate's AllowN(t, n) and TokensAt(t) do: for tests,
// replays and simulations. Instants are whole microseconds, an instant
// between two decided at the earlier, and every decision reports the
// instant it was made at ([Decision].At), from which its waits count.
//
// Reservations need an algorithm that can hold debt: the token bucket
// and GCRA. A reservation's debt is its place in line, so
// [Limiter.WithQueue] bounds how many wait per key, across every process
// sharing the store: with a burst of 1 it shapes traffic, requests
// leaving one at a time at the limit's rate, as nginx's limit_req does
// (docs/shaping.md). A waiter that gives up is refunded, within
// [CleanupTimeout].
//
// A [Stack] applies several named rules to one request, all or nothing:
// a per-user, a per-tenant and a global limit, or a burst limit and a
// daily quota. It has the same verbs (Allow, AllowAtMost, Peek, Level,
// Reserve, Wait, Acquire, Reset, and At) and answers with a [Verdict]:
// the binding rule's decision and each rule's own. On every sluice
// store, through every sluice decorator, a stack's decision is one
// atomic store call; its partial admission charges every rule the most
// all of them admit.
//
// Limits read as English: sluice.PerSecond(10).WithBurst(50),
// sluice.PerDay(1000), sluice.Every(time.Minute); [Inf] admits
// everything. A [Decision] says whether a request was admitted, what is
// left, when to retry and what produced it ([Source]: the store, a
// cache, or an outage policy). A denial is a value, not an error: Allowed
// is false and the error nil. An error means the request was invalid
// (the sentinels [ErrInvalidLimit], [ErrInvalidCost], [ErrInvalidKey],
// [ErrInvalidTime], [ErrNoAlgorithm], [ErrInvalidRequest]) or the store
// failed; wrappers keep the sentinel for [errors.Is]. A cost above a
// limit's capacity can never be admitted: its decision is
// Unsatisfiable.
//
// [Limit], [Decision], [Level], [Source], [Store], [Algorithm] and the
// errors are core's own, named here too, so that a program imports this
// package alone: sluice.Limit and core.Limit are one type. The
// algorithms are in package algorithms; stores in stores/memstore,
// stores/redisstore, stores/rueidisstore and stores/layered; the outage
// breaker and per-key policy in package policy; tracing and metrics in
// package telemetry.
package sluice
