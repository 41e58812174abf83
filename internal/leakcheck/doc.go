// Package leakcheck fails a package's tests when goroutines of sluice, or
// of the clients and libraries it starts goroutines in, outlive them: a
// store, a breaker, a client or a middleware that a test closed must have
// stopped every goroutine it started. It is the check behind "no
// goroutine outlives Close", run after every package's tests.
package leakcheck
