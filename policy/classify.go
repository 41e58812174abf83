package policy

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/sluicehq/sluice/core"
)

// connFailures are the system errors of a connection that failed.
var connFailures = []error{
	syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE,
	syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ENETDOWN, syscall.ETIMEDOUT,
}

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
//     timeouts and failed dials;
//   - a broken connection: ECONNREFUSED, ECONNRESET, ECONNABORTED, EPIPE,
//     EHOSTUNREACH, ENETUNREACH, ENETDOWN, ETIMEDOUT, [io.EOF],
//     [io.ErrUnexpectedEOF] or [net.ErrClosed].
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
func IsStoreFailure(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || isRequestError(err) {
		return false
	}
	if errors.Is(err, core.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return true
	}
	for _, e := range connFailures {
		if errors.Is(err, e) {
			return true
		}
	}
	_, ok := errors.AsType[net.Error](err)
	return ok
}

// isRequestError reports errors of the request or of the breaker's own
// use, which never count either way.
func isRequestError(err error) bool {
	for _, e := range [...]error{
		core.ErrInvalidLimit, core.ErrInvalidCost, core.ErrInvalidKey, core.ErrInvalidTime,
		core.ErrInvalidRequest, core.ErrNoAlgorithm, core.ErrUnsupported, core.ErrClosed,
	} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
