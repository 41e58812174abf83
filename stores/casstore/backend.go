package casstore

import "context"

// Backend is what a database gives a [Store]: a compare-and-swap of a
// batch of keys' states on the database's clock, a delete, and a delete
// of expired states. Keys and states are opaque bytes to it, written and
// compared whole; the Store encodes them. Its methods must be safe for
// concurrent use.
//
// The Store decides everything else (the algorithms, batches, retries,
// turns, the clock's estimate), so a Backend holds no state of its own
// but its connection: see docs/stores.md for PostgreSQL's, in one SQL
// function.
type Backend interface {
	// Swap checks, atomically, that every key of b holds b.Old's state
	// and that b.At lies within b.Lag µs before the backend's clock
	// (b.At 0: no check of the clock); if both hold, it writes b.New,
	// each with its expiry, and reports Swapped. Otherwise it writes
	// nothing and returns each key's state as it found it in Cur, one a
	// key in b's order, nil for a key without one. Either way it returns
	// its clock, in µs since the Unix epoch, read during the call.
	//
	// Keys come in ascending byte order: a backend that locks them, in
	// that order, never deadlocks with another Swap. A key's state and
	// nil differ (nil is no state at all); two states are equal only if
	// their bytes are. An error means the backend failed: the Store
	// returns it as it is, so the Backend wraps it with its prefix and
	// marks outages with core.ErrUnavailable.
	Swap(ctx context.Context, b *Batch) (Reply, error)
	// Delete deletes key's state, if it has one.
	Delete(ctx context.Context, key []byte) error
	// Expire deletes at most limit states whose expiry is before before
	// (µs of the backend's clock), and returns how many it deleted.
	Expire(ctx context.Context, before int64, limit int) (int64, error)
}

// Batch is one compare-and-swap ([Backend.Swap]): what each key is
// expected to hold, and what to write if all do. Its slices are as long
// as Keys. The Store makes it, and reuses it across a call's tries: a
// Backend must not keep it.
type Batch struct {
	// Keys are the keys, distinct, in ascending byte order.
	Keys [][]byte
	// Old holds each key's expected state; nil for none.
	Old [][]byte
	// New holds each key's state to write; nil to leave the key as it
	// is (a denial, a peek). A key expected to have no state gets one;
	// one expected to have a state has it replaced.
	New [][]byte
	// Exp holds each new state's expiry, in µs of the backend's clock:
	// from then on the state decides as none would, and
	// [Backend.Expire] may delete it.
	Exp []int64
	// At is the instant the Store decided at, in µs of the backend's
	// clock as it estimates it, or 0 when no decision depended on it
	// (every request carried its own instant).
	At int64
	// Lag is how far, in µs, At may trail the backend's clock.
	Lag int64
}

// Reply is what [Backend.Swap] found.
type Reply struct {
	// Swapped reports that every key held its expected state, At lay
	// within Lag before Clock, and the new states are written.
	Swapped bool
	// Clock is the backend's clock during the call, in µs since the
	// Unix epoch.
	Clock int64
	// Cur holds, when not Swapped, each key's state as found (nil: none),
	// in the batch's order. When Swapped it may be nil.
	Cur [][]byte
}
