package telemetry

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"

	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/rediserr"
)

// The error.type values [ErrorType] gives sluice's own failures and the
// usual failures of a remote store.
const (
	ErrorTypeInvalidRequest = "invalid_request" // the request failed core's validation
	ErrorTypeClosed         = "closed"          // core.ErrClosed
	ErrorTypeUnsupported    = "unsupported"     // core.ErrUnsupported
	ErrorTypeTimeout        = "timeout"         // a deadline passed
	ErrorTypeCanceled       = "canceled"        // the caller's context was canceled
	ErrorTypeConnection     = "connection"      // the connection failed or was refused
	ErrorTypeRedis          = "redis"           // a Redis error reply with an unusual prefix
	ErrorTypeUnavailable    = "unavailable"     // core.ErrUnavailable with no Redis reply or network error
)

// redisPrefixes are the codes of Redis error replies that [ErrorType]
// reports as they are; another code is reported as "redis", so that a
// script's own error_reply texts cannot grow the attribute's values.
var redisPrefixes = map[string]bool{
	"ERR": true, "WRONGTYPE": true, "NOSCRIPT": true, "BUSY": true,
	"BUSYKEY": true, "READONLY": true, "LOADING": true, "OOM": true,
	"CLUSTERDOWN": true, "TRYAGAIN": true, "MOVED": true, "ASK": true,
	"CROSSSLOT": true, "NOPERM": true, "NOAUTH": true, "WRONGPASS": true,
	"MASTERDOWN": true, "MISCONF": true, "NOREPLICAS": true,
	"EXECABORT": true, "UNBLOCKED": true, "NOPROTO": true, "NOTBUSY": true,
}

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
//   - for an error reply from Redis (as go-redis or rueidis report it), its
//     code, such as "BUSY", "READONLY", "LOADING", "OOM", "CLUSTERDOWN",
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
// Whether an error counts against the store is package policy's
// IsStoreFailure, which reads the same marks: a Redis code here says
// which failure it was, not whether it was one. The result is empty for a
// nil error. A decorator counts at most 16 values per algorithm; further
// ones are counted as "_OTHER".
func ErrorType(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, core.ErrInvalidKey), errors.Is(err, core.ErrInvalidCost),
		errors.Is(err, core.ErrInvalidLimit), errors.Is(err, core.ErrInvalidTime),
		errors.Is(err, core.ErrNoAlgorithm), errors.Is(err, core.ErrInvalidRequest):
		return ErrorTypeInvalidRequest
	case errors.Is(err, core.ErrClosed):
		return ErrorTypeClosed
	case errors.Is(err, core.ErrUnsupported):
		return ErrorTypeUnsupported
	case errors.Is(err, context.Canceled):
		return ErrorTypeCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return ErrorTypeTimeout
	}
	if code, ok := rediserr.Code(err); ok {
		if redisPrefixes[code] {
			return code
		}
		return ErrorTypeRedis
	}
	var ne net.Error
	if errors.As(err, &ne) {
		if ne.Timeout() {
			return ErrorTypeTimeout
		}
		return ErrorTypeConnection
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed) {
		return ErrorTypeConnection
	}
	if errors.Is(err, core.ErrUnavailable) {
		return ErrorTypeUnavailable
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
