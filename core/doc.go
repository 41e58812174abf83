// Package core holds sluice's contracts: the [Limit] a key is held to, the
// [Request] a store is asked to decide and the [Decision] it answers, the
// [Algorithm] that decides, the [Store] that keeps state, and the
// [Limiter] that most code holds.
//
// An algorithm is a pure transition over a small per-key [State], in
// integer microseconds; a store runs it atomically for a key, in process
// (package memstore) or inside Redis. Because every store runs the same
// transition with the same integer arithmetic, a decision never depends on
// the backend, and the conformance suite in package storetest proves it.
//
// A denial is a value, not an error: [Decision.Allowed] is false and the
// error nil. An error means the request was invalid (the sentinels
// [ErrInvalidLimit], [ErrInvalidCost], [ErrInvalidKey], [ErrInvalidTime],
// [ErrNoAlgorithm]) or the store failed; wrappers keep the sentinel for
// [errors.Is]. A cost above a limit's capacity can never be admitted: its
// decision is [Decision.Unsatisfiable], with a RetryAfter of [RetryNever].
//
// A [Store] has one required method, Apply. Stores may also implement
// these optional interfaces, found by type assertion:
//
//   - [Resetter], to forget a key's state;
//   - [io.Closer], to release resources; calls after Close fail with
//     [ErrClosed].
//
// Peeking needs no optional interface: [Request.Peek] asks any store for a
// decision without charging it. [StoreFunc] turns a function into a Store,
// for tests and small decorators.
//
// A decorator is a Store that wraps another (the breaker in package
// policy, the telemetry and layered stores). Each of sluice's decorators
// keeps its inner store's abilities: it implements Reset by forwarding to
// the inner store (failing with [ErrUnsupported] when that is no
// [Resetter]), Close by releasing what it owns and then closing the inner
// store if that is an [io.Closer], so a chain closes as one, and
// Unwrap() Store, which returns the inner store so that code can find a
// layer of the chain by type.
//
// Every request carries its limit, so a key's limit can change between
// calls (per-key tiers, live reconfiguration); each algorithm documents what
// it does with state written under another limit.
package core
