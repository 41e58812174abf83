// Package policy decides what a limiter does when its store fails, and
// which limit applies to which key.
//
// [New] applies per-key policy in front of any store: limit overrides
// (tiers), allow and deny lists, shadow mode (decide and record, never
// deny) and a near-limit signal. See [Policy].
//
// A [Breaker] is a store decorator, a [core.Store] in front of a remote
// store (Redis, through package redisstore or rueidisstore), built on
// sony/gobreaker's two-step circuit breaker. Every call to the store runs
// under a short per-call deadline, so a slow Redis counts as a failing
// one. The deadline is kept on the process clock, which stops while the
// process does not run (frozen at its CPU quota, waiting for a core,
// paused by the collector), and it follows the store: three times the
// 99.9th percentile of recent answers, between [DefaultTimeout] (16 ms)
// and [DefaultMaxTimeout] (100 ms). A busy host is thus not taken for a
// sick store (see [WithTimeout]). A call that fails as the store's failure
// ([IsStoreFailure]: a timeout, a refused or broken connection, a Redis
// error such as LOADING, BUSY, READONLY or OOM) is answered by the
// breaker's [Mode] instead of returning an error; once failures make up
// half the calls of the last second the circuit opens, and no call reaches
// the store until the open timeout has passed and a few probes succeed.
// Meanwhile every decision is the mode's, made in process at once:
//
//   - [FailOpen] allows, marked [core.SourceFailOpen];
//   - [FailClosed] denies, marked [core.SourceFailClosed], which the HTTP
//     and gRPC middleware answer with 503 and Unavailable;
//   - [Degrade] decides on the local store you give it ([WithLocal], a
//     memstore of the process's own) under the limit divided by the
//     number of instances ([WithInstances]), marked
//     [core.SourceDegraded].
//
// A sluice.Stack of several rules reaches a decorator as one batch
// ([core.Store].ApplyAll), and each decorator of this package keeps it
// one. The breaker makes one call of the store, and of the circuit, per
// decision; while the store cannot decide, its mode answers the whole
// stack: every rule allowed, every rule denied, or the stack decided
// atomically on the local store, each rule under the instance's share of
// its own limit. A [Policy] applies its lists, overrides, near-limit
// signal and shadow mode rule by rule, and sends the rules it does not
// answer itself to the store in one call.
//
// A caller that gives up (its context is cancelled or its deadline passes)
// never counts against the store, and gets its context's error; a denial
// is a success. Invalid requests and errors that are not the store's
// failure are returned as errors and do not count.
//
// One Breaker should guard each Redis, shared by every limiter that uses
// it, so that they see one circuit; [Breaker.WithMode] gives each limiter
// the mode it needs (fail-closed for logins, fail-open for reads, say) over
// that one circuit. [WithOnChange] reports each change of state, outside
// the breaker's locks; [Breaker.BreakerState] and
// [Breaker.BreakerChanges] are what package telemetry reports.
//
// docs/outages.md is the runbook: what each mode admits while Redis is
// down, what to alert on, the client options that keep a call's cost
// bounded, and how to test an outage in your own service.
package policy
