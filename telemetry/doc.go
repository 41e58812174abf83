// Package telemetry traces and measures rate-limit decisions with
// OpenTelemetry: [New] wraps any [core.Store] in a decorator that opens
// one span per decision (one for all the rules of a sluice.Stack's
// decision, see [Store.ApplyAll]) and records metrics an operator can
// alert on.
//
// The span, named [SpanName] ("ratelimit.decide"), is INTERNAL, starts
// from the caller's context, only when that holds a span that is sampled
// or records (unless [WithRootSpans]), and is passed down, so the spans of a Redis
// client's instrumentation (redisotel for go-redis, rueidisotel for
// rueidis) nest under it. Its attributes, in the ratelimit namespace
// ([LimiterKey], [AlgorithmKey], [AllowedKey], [RemainingKey],
// [SourceKey], ...), say what was asked and decided, and where the
// decision came from: the store, a local cache or lease, or a failure
// policy (fail-open, fail-closed, degraded) while the store is down. A
// denial is a decision, not an error: only a failed request or store sets
// the status to Error, with error.type ([ErrorType]).
//
// The metrics are ratelimit.decisions (by result and source),
// ratelimit.decision.duration, ratelimit.store.errors (by error.type),
// ratelimit.near_limit (admissions a policy below marked near the limit,
// policy.WithNearLimit), ratelimit.store.healed (decisions on a key
// another client overwrote, which the store replaced: core.Decision's
// Healed, also a [HealedEventName] event on the span) and, when the chain
// has a circuit
// breaker ([Breaker]), ratelimit.breaker.state and
// ratelimit.breaker.changes. Their attributes take values from small fixed
// sets, so a service has a few dozen series per instrument whatever its
// traffic. docs/telemetry.md lists every attribute and metric with its
// type and unit, with a sample trace and sample alerts.
//
// [NewAdaptive] observes an adaptive.Controller: the gauge
// ratelimit.adaptive.limit, the counter ratelimit.adaptive.changes, and a
// span [AdaptSpanName] with a [LimitChangedEventName] event for each
// change of the adapted limit.
//
// Keys are personal data (user ids, IP addresses): they never go into a
// metric, and go into spans only hashed with a secret ([WithKeyHash]) or,
// when explicitly asked, raw ([WithRawKey]).
//
// The decorator follows the OpenTelemetry Go contrib rules: it uses the
// global providers unless given [WithTracerProvider] and
// [WithMeterProvider], names its scope [ScopeName] at [Version], and
// imports only the OpenTelemetry API. With providers that record nothing
// it adds a few nanoseconds to a decision and no allocation.
package telemetry
