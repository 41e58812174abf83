// Package core holds what a program holds to limit rates, and the
// contracts that stores and algorithms implement.
//
// # Using sluice
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
// Reservations need an algorithm that can hold debt ([Reserver]): the
// token bucket and GCRA. A reservation's debt is its place in line, so
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
// Limits read as English: core.PerSecond(10).WithBurst(50),
// core.PerDay(1000), core.Every(time.Minute); [Inf] admits everything.
// A [Decision] says whether a request was admitted, what is left, when to
// retry and what produced it ([Source]: the store, a cache, or an outage
// policy). A denial is a value, not an error: Allowed is false and the
// error nil. An error means the request was invalid (the sentinels
// [ErrInvalidLimit], [ErrInvalidCost], [ErrInvalidKey], [ErrInvalidTime],
// [ErrNoAlgorithm], [ErrInvalidRequest]) or the store failed; wrappers
// keep the sentinel for [errors.Is]. A cost above a limit's capacity can
// never be admitted: its decision is [Decision.Unsatisfiable].
//
// The algorithms are in package algorithms; stores in stores/memstore,
// stores/redisstore, stores/rueidisstore and stores/layered; the outage
// breaker and per-key policy in package policy; tracing and metrics in
// package telemetry.
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
// [OpRefund], [OpReserve] or [OpAtMost]. A store runs [Run] (or [RunAll]
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
// layered.Batcher (a cache may take its capacity in batches). [AlgorithmAs] finds them, looking through
// wrappers such as a stack's rules.
//
// A transition reports the key's level after its step ([Decision].Level)
// and keeps the contract of [Decision].Remaining that partial admissions
// rely on: after a step of cost 0 it is the largest cost the algorithm
// admits.
//
// Every request carries its limit, so a key's limit can change between
// calls (per-key tiers, live reconfiguration); each algorithm documents
// what it does with state written under another limit.
package core
