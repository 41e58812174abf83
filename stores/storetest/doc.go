// Package storetest is the conformance suite every [core.Store] must
// pass, in the spirit of testing/fstest.TestFS: sluice's own stores run it,
// and so can yours.
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) core.Store { return newMyStore(t) })
//	}
//
// [Run] checks, for every algorithm in package algorithms: step tables at
// fixed instants; long random traces (costs, gaps, peeks, limit changes and
// a clock that runs backwards) whose every decision must equal the Go
// transition's; exactness under concurrency (ConcurrentSafe); peeks that
// charge nothing; unsatisfiable costs; and decisions on the store's own
// clock; and refunds, which must undo a charge exactly. It also checks key
// independence (braces, Unicode, maximum length), bad input, [core.Inf],
// reservations ([core.Request.MaxWait]), multi-limit requests
// ([core.ApplyAll]: a denied request charges no rule, against a reference),
// and, where the store implements them, Reset and Close.
//
// The suite decides at explicit instants wherever it checks exact numbers,
// so it suits stores whose clock is elsewhere, such as a Redis server; and
// it never uses a key twice, so stores may share one backend.
package storetest
