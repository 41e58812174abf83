// Package httplimit is net/http middleware over a sluice sluice.Stack: it
// finds each request's key under every rule of the stack, charges the
// request's cost to all of them at once, all or nothing, and answers with
// the status, headers and body each outcome calls for.
//
// # Rules and keys
//
// A stack holds the limits a request passes through together: say, 10 a
// second per user, 1000 a minute per tenant and 50,000 a minute for the
// whole service. Each rule is keyed by a [KeyFunc] of its own, given by
// [WithKey]: per user from an API key ([HeaderKey]) or an authenticated
// identity ([IdentityKey]), per tenant from a header, everyone together
// with [GlobalKey]. Rules without one are keyed by the default key
// function ([WithKeyFunc]).
//
// The default key function keys a request by its client's address
// ([ClientIP]): the remote address, unless it is one of the trusted
// proxies given with [WithTrustedProxies], in which case the forwarding
// header (X-Forwarded-For, or Forwarded with [WithForwardedHeader]) is
// walked from right to left to the first address that is not a trusted
// proxy's. No proxy is trusted by default, so a client cannot pick its
// key by sending the header itself. Addresses are unmapped first
// (::ffff:1.2.3.4 is 1.2.3.4); IPv6 clients are keyed by their /64
// ([WithIPv6Prefix]). A request without a usable key for some rule is
// answered 400 by default ([WithNoKeyHandler]); it is never let through
// unlimited, nor charged to one key shared by all such requests.
//
// # All or nothing
//
// A request is charged through the stack in one decision
// (sluice.Stack.AllowN): if every rule admits it, every rule is charged;
// if any rule denies it, none is. A per-minute limit of 10 in front of a
// daily limit of 1 answers one 200, then 429s, and the per-minute rule
// keeps 9 of its 10 however many requests the daily rule denies. On
// every sluice store, and through the policy, telemetry and layered
// decorators, that decision is one atomic store call.
//
// A stack with a concurrency rule (algorithms.Concurrency, [core.Leases])
// limits how many requests are in the handler at once: the middleware
// acquires the request's slots with sluice.Stack.AcquireN, holds them
// while the handler runs, and releases them when it returns or panics
// (the panic goes on). The rule's Period is the slots' time to live, and
// must be longer than the slowest handler.
//
// # Shaping
//
// With [WithQueue] or [WithMaxDelay] the middleware shapes traffic, as
// nginx's limit_req does, rather than only limiting it: a request the
// stack cannot admit at once is reserved (sluice.Stack.ReserveN; the
// token bucket and GCRA reserve) and waits its turn, honouring the
// request's context, then is served; one that finds the line full (or
// would wait longer than the delay) is answered 429 at once, its
// Retry-After the time until a place in the line frees. A client that
// goes away while it waits is refunded, and its place goes to the next
// arrival. docs/shaping.md maps every limit_req setting.
//
// # Outcomes
//
//   - Allowed: the request is served, with rate-limit headers
//     ([WithHeaders]; by default the IETF draft's RateLimit-Policy, an
//     item for every rule, and RateLimit, the binding rule's numbers).
//   - Denied: 429 Too Many Requests, with the headers, Retry-After in
//     whole seconds (the binding rule's wait: never earlier than the
//     RateLimit field's t, but for a shaping middleware, whose refused
//     request may retry as soon as a place in the line frees; optional
//     jitter only adds, see [WithRetryJitter]) and an RFC 9457 application/problem+json body
//     whose violated-policies lists every rule that denied ([WriteDenied],
//     [WithDeniedHandler]).
//   - The store failed, or the stack's failure policy answered
//     fail-closed ([core.SourceFailClosed]): 503 Service Unavailable with
//     a problem body ([WriteUnavailable], [WithErrorHandler]), never 429
//     (nothing was limited) and never 500.
//
// Shadow mode, fail-open and near-limit signals are not the middleware's:
// they are decided once, in the store chain (package policy), and the
// middleware reads the decision's [core.Source]. A shadow decision
// ([core.SourceShadow]) is an allowed one, served with headers; a
// fail-open decision ([core.SourceFailOpen]) is served without headers,
// since it knows no limit.
//
// # Headers
//
// Rule names are the policy names of the headers and problem bodies
// (sluice's rule names are letters, digits, '-', '_' and '.', valid
// structured field Strings as they are). A rule's capacity, q in
// RateLimit-Policy and the limit of the other header sets, is what its
// algorithm reports as [core.Decision].Limit: the burst for the bucket
// algorithms, the rate for the window algorithms. w is the time to earn
// q back at the limit's rate, in whole seconds rounded up: 10/s with a
// burst of 50 is q=50;w=5, 100/min under a window algorithm q=100;w=60.
package httplimit
