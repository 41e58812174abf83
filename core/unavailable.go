package core

import (
	"context"
	"errors"
	"io"
	"net"
)

// ErrUnavailable marks an error of a store that could not decide, such
// that any request would have failed alike while the store, or its
// client's configuration, stays as it is: Redis answering LOADING, OOM or
// READONLY, a user without the permissions sluice needs, a wrong
// password, a client that timed out waiting for a connection of its
// pool, a TLS handshake that failed. It is the opposite of an error of
// the request (an invalid key, a script that failed on this request's
// state), which the store would not return for another request.
//
// A store wraps the errors it knows to be such with ErrUnavailable where
// it receives them, keeping the original on the chain:
//
//	return fmt.Errorf("%w: %w", core.ErrUnavailable, err)
//
// Decorators read it, never the client's error: package policy's breaker
// counts such an error as the store's failure and answers the call by
// its mode (fail-open, fail-closed, degrade), and package telemetry
// reports it. Timeouts and broken connections need no mark: every store
// may return them, and the breaker knows them by their types.
var ErrUnavailable = errors.New("sluice: store unavailable")

// StoreError is an error a store received from its backend, marked where
// it was received with what it was: Type names it, such as a Redis
// reply's code ("READONLY", "ERR"), and Unavailable says whether any
// request would get it while the store stays as it is, in which case
// errors.Is(err, ErrUnavailable) holds. Err, the client's error, stays on
// the chain. The Redis stores mark every Redis error reply so; a store of
// your own may, or may wrap its errors with ErrUnavailable alone.
type StoreError struct {
	// Type is the error's error.type in telemetry: a Redis reply's code,
	// or "" for none (Classify then reads Err).
	Type string
	// Unavailable reports whether any request would get the error while
	// the store, or its client's configuration, stays as it is.
	Unavailable bool
	// Err is the client's error.
	Err error
}

// Error returns Err's text, after ErrUnavailable's for an error of an
// unavailable store.
func (e *StoreError) Error() string {
	if e.Unavailable {
		return ErrUnavailable.Error() + ": " + e.Err.Error()
	}
	return e.Err.Error()
}

// Unwrap returns Err, and ErrUnavailable before it for an error of an
// unavailable store.
func (e *StoreError) Unwrap() []error {
	if e.Unavailable {
		return []error{ErrUnavailable, e.Err}
	}
	return []error{e.Err}
}

// ErrorType returns Type, as OpenTelemetry's error.type convention reads
// it.
func (e *StoreError) ErrorType() string { return e.Type }

// The kinds of failure [Classify] names, the values of telemetry's
// error.type for them.
const (
	FailureInvalidRequest = "invalid_request" // the request failed core's validation
	FailureClosed         = "closed"          // ErrClosed
	FailureUnsupported    = "unsupported"     // ErrUnsupported
	FailureTimeout        = "timeout"         // a deadline passed
	FailureCanceled       = "canceled"        // the caller's context was canceled
	FailureConnection     = "connection"      // the connection failed or was refused
	FailureUnavailable    = "unavailable"     // ErrUnavailable with no StoreError Type or network error
)

// Failure is how sluice classifies the error of a store call, once for
// every decorator: package policy's breaker reads Store, package
// telemetry reads Type.
type Failure struct {
	// Type names the failure: one of the Failure constants, a
	// [StoreError]'s Type (a Redis reply's code), or "" for an error none
	// of them describes.
	Type string
	// Store reports whether the store could not decide, as opposed to a
	// request it refused or a caller that gave up.
	Store bool
}

// Classify classifies err, in this order of preference:
//
//   - the request's errors ([ErrInvalidKey], [ErrInvalidCost],
//     [ErrInvalidLimit], [ErrInvalidTime], [ErrNoAlgorithm],
//     [ErrInvalidRequest]: "invalid_request"; [ErrClosed]: "closed";
//     [ErrUnsupported]: "unsupported") and [context.Canceled]
//     ("canceled") are not the store's;
//   - [context.DeadlineExceeded] is a "timeout" of the store;
//   - a [StoreError] with a Type is of that Type, the store's if it is
//     marked Unavailable;
//   - a [net.Error] (which every [syscall.Errno] is) is a "timeout" if it
//     timed out, else a "connection" failure; [io.EOF],
//     [io.ErrUnexpectedEOF] and [net.ErrClosed] are "connection"
//     failures; all of them the store's;
//   - another error marked with [ErrUnavailable] is the store's,
//     "unavailable";
//   - any other error is not the store's, and of no Type.
func Classify(err error) Failure {
	switch {
	case err == nil:
		return Failure{}
	case errors.Is(err, ErrInvalidKey), errors.Is(err, ErrInvalidCost),
		errors.Is(err, ErrInvalidLimit), errors.Is(err, ErrInvalidTime),
		errors.Is(err, ErrNoAlgorithm), errors.Is(err, ErrInvalidRequest):
		return Failure{Type: FailureInvalidRequest}
	case errors.Is(err, ErrClosed):
		return Failure{Type: FailureClosed}
	case errors.Is(err, ErrUnsupported):
		return Failure{Type: FailureUnsupported}
	case errors.Is(err, context.Canceled):
		return Failure{Type: FailureCanceled}
	case errors.Is(err, context.DeadlineExceeded):
		return Failure{Type: FailureTimeout, Store: true}
	}
	if se, ok := errors.AsType[*StoreError](err); ok && se.Type != "" {
		return Failure{Type: se.Type, Store: errors.Is(err, ErrUnavailable)}
	}
	if ne, ok := errors.AsType[net.Error](err); ok {
		if ne.Timeout() {
			return Failure{Type: FailureTimeout, Store: true}
		}
		return Failure{Type: FailureConnection, Store: true}
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return Failure{Type: FailureConnection, Store: true}
	}
	if errors.Is(err, ErrUnavailable) {
		return Failure{Type: FailureUnavailable, Store: true}
	}
	return Failure{}
}
