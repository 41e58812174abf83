// Package grpclimit is gRPC server middleware over a sluice sluice.Stack:
// unary and stream interceptors that find each call's key under every
// rule of the stack, charge the call's cost to all of them at once, all
// or nothing, and fail the calls they must with the status each outcome
// calls for.
//
// A stack holds the limits a call passes through together: per user, per
// tenant, for the whole service. Each rule is keyed by a [KeyFunc] of its
// own, given by [WithKey]: metadata such as an API key ([MetadataKey]),
// an authenticated identity (a KeyFunc of your own), or [GlobalKey] for
// everyone together. Rules without one are keyed by the default key
// function ([WithKeyFunc]), by default the peer's address ([PeerKey]:
// IPv4 unmapped, IPv6 by /64). A call is charged once, through the stack
// (sluice.Stack.AllowN): if any rule denies it, no rule is charged. A
// stream is charged once, when it starts. A stack with a concurrency rule
// ([core.Leases]) holds the call's slots while its handler runs, and
// releases them when the handler returns or panics (the panic goes on).
//
//   - Allowed: the call is served.
//   - Denied: codes.ResourceExhausted, with a google.rpc.RetryInfo whose
//     retry_delay is the binding rule's wait (sluice.Verdict.Binding: the
//     denying rule with the longest wait), rounded up to the millisecond
//     and never less than 1ms (left out when the call's cost can never be
//     admitted), and a google.rpc.QuotaFailure with a violation for every
//     rule that denied (subject "policy:NAME", quota_id NAME, quota_value
//     its capacity, description the limit, such as "10 req/s (burst
//     50)"). Clients read the delay with [RetryDelay].
//   - The store failed, or the stack's failure policy answered fail-closed
//     ([core.SourceFailClosed]): codes.Unavailable, never
//     ResourceExhausted (nothing was limited). [WithErrorHandler] sees
//     every such failure, to log it.
//   - No key: codes.InvalidArgument. A call is never let through
//     unlimited for lack of a key.
//
// Shadow mode, fail-open and near-limit signals are decided once, in the
// store chain (package policy); the interceptors read the decision's
// [core.Source]: a shadow or fail-open decision is an allowed one, and the
// call is served.
//
// The package is its own module, so that the sluice module does not
// require gRPC.
package grpclimit
