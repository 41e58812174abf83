package policy

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/sluicehq/sluice/core"
)

// redisFailures are the Redis error codes that mean the server cannot
// decide now, though a request like this one would succeed on a healthy
// server: it is loading its data, busy in a script, a replica (after a
// failover, before clients follow), cut off from its primary, part of a
// cluster that is down or resharding, or out of memory.
var redisFailures = []string{"LOADING", "BUSY", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "OOM"}

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
//   - a timeout: [context.DeadlineExceeded] (the breaker's per-call
//     deadline, or a client's own), or a [net.Error], which includes
//     timeouts and failed dials;
//   - a broken connection: ECONNREFUSED, ECONNRESET, ECONNABORTED, EPIPE,
//     EHOSTUNREACH, ENETUNREACH, ENETDOWN, ETIMEDOUT, [io.EOF],
//     [io.ErrUnexpectedEOF] or [net.ErrClosed];
//   - a Redis error reply whose code is LOADING, BUSY, READONLY,
//     MASTERDOWN, CLUSTERDOWN, TRYAGAIN or OOM, found as the text of any
//     error on err's chain (go-redis and rueidis both keep the server's
//     reply as an error whose text starts with its code).
//
// Everything else is not: nil, [context.Canceled], an invalid request
// (the core.ErrInvalid… sentinels, [core.ErrNoAlgorithm],
// [core.ErrUnsupported]), [core.ErrClosed], other Redis errors (WRONGTYPE,
// NOPERM, a script's error; NOSCRIPT never reaches here, as the stores
// answer it with EVAL) and a malformed reply (the stores' ErrMalformed),
// which is a fault of one script, not of the server, and must not switch
// every limiter on that server to its outage mode.
//
// IsStoreFailure looks only at err: a breaker first checks the caller's
// context, so that a call whose caller gave up never counts, whatever its
// error says.
func IsStoreFailure(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || isRequestError(err) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return true
	}
	for _, e := range connFailures {
		if errors.Is(err, e) {
			return true
		}
	}
	if _, ok := errors.AsType[net.Error](err); ok {
		return true
	}
	return hasRedisFailure(err, 0)
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

// maxChain bounds the walk down an error's chain.
const maxChain = 32

// hasRedisFailure reports whether an error on err's chain, as deep as
// depth so far, has a text starting with one of redisFailures' codes.
func hasRedisFailure(err error, depth int) bool { return redisCode(err, depth) != "" }

// redisCode returns the first of redisFailures' codes that starts the
// text of an error on err's chain, as deep as depth so far, or "".
func redisCode(err error, depth int) string {
	for ; err != nil && depth < maxChain; depth++ {
		if code, _, _ := strings.Cut(err.Error(), " "); isFailureCode(code) {
			return code
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if code := redisCode(e, depth+1); code != "" {
					return code
				}
			}
			return ""
		default:
			return ""
		}
	}
	return ""
}

func isFailureCode(code string) bool {
	for _, c := range redisFailures {
		if code == c {
			return true
		}
	}
	return false
}
