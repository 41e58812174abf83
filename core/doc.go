// Package core holds the contracts that stores and algorithms implement,
// and the values they carry: a [Store] decides each [Request], an
// [Algorithm] is a transition over a key's [State], and both speak in a
// [Limit] and a [Decision]. A program holds a sluice.Limiter or a
// sluice.Stack (package [github.com/sluicehq/sluice]), which names
// these values too, and need not import core; this package is for those
// who write a store, a decorator or an algorithm, as
// database/sql/driver is for those who write a driver.
//
// Limits read as English: core.PerSecond(10).WithBurst(50),
// core.PerDay(1000), core.Every(time.Minute); [Inf] admits everything.
// A denial is a value, not an error: a [Decision] with Allowed false and
// a nil error. An error means the request was invalid (the sentinels
// [ErrInvalidLimit], [ErrInvalidCost], [ErrInvalidKey], [ErrInvalidTime],
// [ErrNoAlgorithm], [ErrInvalidRequest]) or the store failed ([StoreError],
// [Classify]); wrappers keep the sentinel for [errors.Is].
//
// # Writing a store or a decorator
//
// A [Store] has four required methods: Apply decides one [Request],
// ApplyAll decides several together (all admitted and charged, or none),
// Reset forgets a key, and Close releases what the store holds. Because
// every method is required, a decorator (the breaker, telemetry, the
// layered cache) cannot lose an ability on the way through a chain: one
// that does not say what it does with a batch does not compile. A store
// that cannot decide a batch atomically calls stores.ApplyInTurn from its
// ApplyAll, by name. A request's [Op] is its verb: [OpCharge], [OpPeek],
// [OpRefund], [OpReserve] or [OpAtMost]. A request holds its call's key,
// cost, verb and lease, and points to its [Terms] (algorithm, limit,
// instant), which a limiter builds once and every call shares: nothing
// changes terms in place ([Request.Clone] gives a request its own). A
// store runs [Run] (or [RunAll]
// for a batch) on a key's state: the algorithm's transition with what
// every store adds to it, the decision's instant and partial admissions;
// a decorator that answers without its store stamps the answer with
// [Request.Answer]. The helpers only store authors need are in
// package [github.com/sluicehq/sluice/stores] (ValidateAll, ApplyInTurn,
// and Func, which turns a function into a Store for tests);
// docs/architecture.md explains the contract and what each decorator
// does with a batch; package storetest is the conformance suite every
// store runs.
//
// # Writing an algorithm
//
// An [Algorithm] is a pure transition over a small per-key [State], in
// integer microseconds ([Step]); a store runs it atomically for a key.
// Because every store runs the same transition with the same integer
// arithmetic, a decision never depends on the backend. What an algorithm
// can do beyond deciding is asked of it through interfaces: [Reserver] (it can hold debt, for reservations), [Leaser]
// (it holds concurrency leases), and interfaces of the packages that use
// them: algorithms.Scripted (a Lua twin, for the Redis stores) and
// layered.Allotter (a cache may take its capacity an allotment at a time). [AlgorithmAs] finds them, looking through
// wrappers such as a stack's rules.
//
// A transition reports the key's level after its step ([Decision].Level)
// and keeps the contract of [Decision].Remaining that partial admissions
// rely on: after a step of cost 0 it is the largest cost the algorithm
// admits.
//
// Every request carries its limit (in its terms), so a key's limit can change between
// calls (per-key tiers, live reconfiguration); each algorithm documents
// what it does with state written under another limit.
package core
