package core

import "errors"

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
