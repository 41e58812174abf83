// Package grpclimit is gRPC server middleware over sluice limiters: unary
// and stream interceptors that find each call's key, charge its cost to
// one or more [core.Limiter]s, and fail the calls they must with the
// status each outcome calls for.
//
//   - Allowed: the call is served.
//   - Denied: codes.ResourceExhausted, with a google.rpc.RetryInfo whose
//     retry_delay is the wait until the call would pass, rounded up to the
//     millisecond and never less than 1ms (left out when the call's cost
//     can never be admitted),
//     and a google.rpc.QuotaFailure naming the policy (subject
//     "policy:NAME", quota_id NAME, quota_value its capacity, description
//     the limit, such as "10 req/s (burst 50)"). Clients read the delay
//     with [RetryDelay].
//   - The store failed, or a failure policy decided fail-closed
//     ([core.SourceFailClosed]): codes.Unavailable, never
//     ResourceExhausted (nothing was limited). [WithFailOpen] serves such
//     calls instead when the store fails; [WithErrorHandler] sees every
//     such failure, to log it.
//   - No key: codes.InvalidArgument. A call is never let through
//     unlimited for lack of a key.
//
// Calls are keyed by their peer's address by default ([PeerKey]: IPv4
// unmapped, IPv6 by /64), or by incoming metadata ([MetadataKey]), or by
// any [KeyFunc]. A stream is charged once, when it starts.
//
// The package is its own module, so that the sluice module does not
// require gRPC.
package grpclimit
