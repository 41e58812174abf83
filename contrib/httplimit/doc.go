// Package httplimit is net/http middleware over sluice limiters: it finds
// each request's key, charges its cost to one or more [core.Limiter]s, and
// answers with the status, headers and body each outcome calls for.
//
// # Keys
//
// By default a request is keyed by its client's address ([ClientIP]): the
// remote address, unless it is one of the trusted proxies given with
// [WithTrustedProxies], in which case the forwarding header
// (X-Forwarded-For, or Forwarded with [WithForwardedHeader]) is walked from
// right to left to the first address that is not a trusted proxy's. No
// proxy is trusted by default, so a client cannot pick its key by sending
// the header itself. Addresses are unmapped first (::ffff:1.2.3.4 is
// 1.2.3.4); IPv6 clients are keyed by their /64 ([WithIPv6Prefix]).
// [HeaderKey], [IdentityKey], [FirstKey] and any [KeyFunc] of your own key
// otherwise. A request without a usable key is answered 400 by default
// ([WithNoKeyHandler]); it is never let through unlimited, nor charged to
// one key shared by all such requests.
//
// # Outcomes
//
//   - Allowed: the request is served, with rate-limit headers
//     ([WithHeaders]; by default the IETF draft's RateLimit-Policy and
//     RateLimit fields).
//   - Denied: 429 Too Many Requests, with the headers, Retry-After in
//     whole seconds (never earlier than the RateLimit field's t; optional
//     jitter only adds, see [WithRetryJitter]) and an RFC 9457
//     application/problem+json body ([WriteDenied], [WithDeniedHandler]).
//   - The store failed, or a failure policy decided fail-closed
//     ([core.SourceFailClosed]): 503 Service Unavailable with a problem
//     body ([WriteUnavailable], [WithErrorHandler]), never 429 (nothing was
//     limited) and never 500. [WithFailOpen] lets such requests through
//     instead when the store fails.
//   - Shadow: a decision a shadow policy made ([core.SourceShadow]) is an
//     allowed one, served with headers; [WithShadow] makes the whole
//     middleware report without enforcing.
//
// # Several limiters
//
// [WithLimiter] adds limiters (say, 10 a second and 1000 a day), applied
// in order with the same key and cost; the first denial answers. A request
// denied by a later limiter has already been charged by the earlier ones:
// sluice does not yet decide several limits atomically. RateLimit-Policy
// lists every policy; RateLimit and the other header sets describe one
// decision: the denial, or, when all allowed, the policy closest to
// exhaustion.
//
// A policy's capacity, q in RateLimit-Policy and the limit of the other
// header sets, is what its algorithm reports as [core.Decision].Limit:
// the burst for the bucket algorithms, the rate for the window algorithms.
// w is the time to earn q back at the limit's rate, in whole seconds
// rounded up: 10/s with a burst of 50 is q=50;w=5, 100/min under a window
// algorithm q=100;w=60.
package httplimit
