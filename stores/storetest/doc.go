// Package storetest is the conformance suite every [core.Store] must
// pass, in the spirit of testing/fstest.TestFS: sluice's own stores run it,
// and so can yours.
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) core.Store { return newMyStore(t) })
//	}
//
// [Run] checks, for every algorithm in package algorithms: step tables at
// fixed instants; long random traces (costs, gaps, peeks, refunds,
// reservations, limit changes and a clock that runs backwards) whose every
// decision must equal the Go transition's; exactness under concurrency
// (ConcurrentSafe); peeks that charge nothing; unsatisfiable costs;
// decisions on the store's own clock; a key last charged 10 s ahead of
// that clock, which must stay denied, decided at that charge, however
// often it is asked (FutureState); two callers whose clocks are 10 s
// apart taking turns on one key, which must get no refill from the turns
// (SkewedClocks, the replay of a limiter that stores each caller's
// instant); and refunds, which must undo a charge exactly. It also
// checks key independence (braces, Unicode, maximum length), bad input,
// [core.Inf], reservations ([core.OpReserve]), concurrency leases, Reset,
// and Close, after which every method fails with [core.ErrClosed].
//
// Batches ([core.Store.ApplyAll]) are checked for every operation against
// a reference that decides each request by its algorithm's Go transition
// on a copy of its key's state and keeps the copies only if all were
// admitted: random batches of charges, peeks and refunds (Multi); a batch
// of peeks answers what each peek alone would and changes nothing
// (BatchPeek); a batch of reservations is all or nothing, each rule owing
// the Delay a reservation alone would get (BatchReserve); refunds
// (BatchRefund); a concurrency rule's leases acquired, renewed and released
// beside a rate rule (BatchLeases); and the batches [stores.ValidateAll]
// rejects (BatchBadInput). Each runs with every rule on one key and with a
// key per rule. Under 64 goroutines a store must admit concurrent batches
// exactly (MultiConcurrentSafe), unless it decides some batches in turn
// ([stores.ApplyInTurn]) and says so with the option [InTurn].
//
// To test code against a store that fails, slows down or stops answering,
// wrap a store in a [Faulty]: it fails the next calls or all of them,
// adds latency, blackholes calls until released, and records every call;
// [ErrOutage] is a failure package policy counts as an outage. To check
// that a chain of decorators hands a batch to the backend as one call, put
// a [Counter] under it and read its [Counter.Counts]. docs/testing.md
// shows both, and testing/synctest for a virtual clock.
//
// The suite decides at explicit instants wherever it checks exact numbers,
// so it suits stores whose clock is elsewhere, such as a Redis server; and
// it never uses a key twice, so stores may share one backend.
package storetest
