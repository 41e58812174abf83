package policy

import (
	"github.com/sluicehq/sluice/core"
)

// IsStoreFailure reports whether err means the store could not decide,
// as opposed to a request it refused or a caller that gave up. A
// [Breaker] counts such errors as failures and answers the call with its
// [Mode]. They are:
//
//   - an error a store marked with [core.ErrUnavailable]: one that any
//     request would get while the store, or its client's configuration,
//     stays as it is. The Redis stores mark Redis's LOADING, BUSY,
//     READONLY, MASTERDOWN, NOREPLICAS, MISCONF, OOM, CLUSTERDOWN,
//     TRYAGAIN, MOVED, ASK and NOSCRIPT replies, a user's missing
//     permissions (NOPERM, and Redis 7.0's ERR for a script's command the
//     user may not run), NOAUTH and WRONGPASS, a failed TLS handshake,
//     go-redis's pool timeout and a closed client; docs/outages.md has the
//     whole table;
//   - a timeout: [context.DeadlineExceeded] (the breaker's per-call
//     deadline, or a client's own), or a [net.Error], which includes
//     timeouts, failed dials and every system error (ECONNREFUSED,
//     ECONNRESET, EPIPE...);
//   - a broken connection: [io.EOF], [io.ErrUnexpectedEOF] or
//     [net.ErrClosed].
//
// It is [core.Classify]'s Store, the one classification that package
// telemetry reads too.
//
// Everything else is the request's error, or the caller's: nil,
// [context.Canceled], an invalid request (the core.ErrInvalid…
// sentinels, [core.ErrNoAlgorithm], [core.ErrUnsupported]),
// [core.ErrClosed], and any error the store did not mark: WRONGTYPE,
// CROSSSLOT, a script's error, a malformed reply (the stores'
// ErrMalformed). Another request would not get it, and it must not switch
// every limiter on that store to its outage mode. IsStoreFailure reads no
// client's error text: a store of your own marks its outage errors with
// core.ErrUnavailable.
//
// IsStoreFailure looks only at err: a breaker first checks the caller's
// context, so that a call whose caller gave up never counts, whatever its
// error says.
func IsStoreFailure(err error) bool { return core.Classify(err).Store }

// isRequestError reports errors of the request or of the breaker's own
// use, which never count either way.
func isRequestError(err error) bool {
	switch core.Classify(err).Type {
	case core.FailureInvalidRequest, core.FailureClosed, core.FailureUnsupported:
		return true
	}
	return false
}
