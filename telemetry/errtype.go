package telemetry

import (
	"errors"

	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"

	"github.com/sluicehq/sluice/core"
)

// The error.type values [ErrorType] gives sluice's own failures and the
// usual failures of a remote store (core.Classify names them).
const (
	ErrorTypeInvalidRequest = core.FailureInvalidRequest // the request failed core's validation
	ErrorTypeClosed         = core.FailureClosed         // core.ErrClosed
	ErrorTypeUnsupported    = core.FailureUnsupported    // core.ErrUnsupported
	ErrorTypeTimeout        = core.FailureTimeout        // a deadline passed
	ErrorTypeCanceled       = core.FailureCanceled       // the caller's context was canceled
	ErrorTypeConnection     = core.FailureConnection     // the connection failed or was refused
	ErrorTypeRedis          = "redis"                    // a Redis error reply with an unusual prefix
	ErrorTypeUnavailable    = core.FailureUnavailable    // core.ErrUnavailable with no Redis reply or network error
)

// ErrorType classifies a store's failure for the error.type attribute of
// spans and of the ratelimit.store.errors counter. It returns, in this
// order of preference:
//
//   - "invalid_request" for errors wrapping core's request sentinels
//     ([core.ErrInvalidKey], [core.ErrInvalidCost], [core.ErrInvalidLimit],
//     [core.ErrInvalidTime], [core.ErrNoAlgorithm],
//     [core.ErrInvalidRequest]); "closed" for
//     [core.ErrClosed]; "unsupported" for [core.ErrUnsupported];
//   - "canceled" for [context.Canceled]; "timeout" for
//     [context.DeadlineExceeded] and network errors that time out;
//   - for an error reply from Redis (as the Redis stores mark it, a
//     [core.StoreError]), its code, such as "BUSY", "READONLY", "LOADING", "OOM", "CLUSTERDOWN",
//     "NOPERM", "NOSCRIPT" or "ERR", or "redis" for an unusual code; a
//     reply without a code is an "ERR" (rueidis drops the "ERR " of an ERR
//     reply's text: such a reply reads as "ERR" from either client);
//   - "connection" for other network errors, refused or reset connections
//     and unexpected EOFs;
//   - "unavailable" for another error a store marked with
//     [core.ErrUnavailable]: a connection pool's timeout, a failed TLS
//     handshake;
//   - otherwise OpenTelemetry's convention: the value of an ErrorType()
//     string method found in the chain, else the error's Go type, such as
//     "*net.OpError" or "github.com/acme/store.BackendError"; for errors
//     joined together (errors.Join, as a batch decided in turn may fail),
//     the class of the first.
//
// The classification is [core.Classify]'s, which package policy's
// IsStoreFailure reads too: a Redis code here says
// which failure it was, not whether it was one. The result is empty for a
// nil error. A decorator counts at most 16 values per algorithm; further
// ones are counted as "_OTHER".
func ErrorType(err error) string {
	if err == nil {
		return ""
	}
	if f := core.Classify(err); f.Type != "" {
		return f.Type
	}
	// A batch decided in turn may fail with several errors joined
	// (errors.Join): classify the first rather than report
	// "*errors.joinError".
	var typed interface{ ErrorType() string }
	var multi interface{ Unwrap() []error }
	if !errors.As(err, &typed) && errors.As(err, &multi) {
		for _, e := range multi.Unwrap() {
			if e != nil {
				return ErrorType(e)
			}
		}
	}
	return semconv.ErrorType(err).Value.AsString()
}
