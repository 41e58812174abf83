package telemetry

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"

	"github.com/sluicehq/sluice/core"
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
)

// redisPrefixes are the error prefixes of Redis replies that [ErrorType]
// reports as they are; another prefix is reported as "redis".
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
//     prefix, such as "BUSY", "READONLY", "LOADING", "OOM", "CLUSTERDOWN",
//     "NOSCRIPT" or "ERR", or "redis" for an unusual prefix;
//   - "connection" for other network errors, refused or reset connections
//     and unexpected EOFs;
//   - otherwise OpenTelemetry's convention: the value of an ErrorType()
//     string method found in the chain, else the error's Go type, such as
//     "*net.OpError" or "github.com/acme/store.BackendError"; for errors
//     joined together (errors.Join, as a batch decided in turn may fail),
//     the class of the first.
//
// The result is empty for a nil error. A decorator counts at most 16
// values per algorithm; further ones are counted as "_OTHER".
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
	if prefix, ok := redisPrefix(err); ok {
		return prefix
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

// redisPrefix finds an error reply from Redis in err's chain: go-redis
// marks its replies with a RedisError method, rueidis's *RedisError has
// IsRedirect. It returns the reply's prefix, or "redis" for one not in
// redisPrefixes.
func redisPrefix(err error) (string, bool) {
	var goredis interface {
		error
		RedisError()
	}
	var rueidis interface {
		error
		IsRedirect() (string, bool)
	}
	var msg string
	switch {
	case errors.As(err, &goredis):
		msg = goredis.Error()
	case errors.As(err, &rueidis):
		msg = rueidis.Error()
	default:
		return "", false
	}
	word, _, _ := strings.Cut(msg, " ")
	if redisPrefixes[word] {
		return word, true
	}
	return ErrorTypeRedis, true
}
