// Package pgstore keeps limiter state in PostgreSQL, through a pgx v5
// pool: a [core.Store] for a fleet that has a PostgreSQL server and no
// Redis. It is a module of its own, so that pgx stays out of sluice's
// main module.
//
// Every algorithm is decided by its Go transition, the specification
// (core.Run and core.RunAll, as in memstore), never by a third twin in
// SQL. A decision is one round trip, one call of a PL/pgSQL function the
// store creates beside its table: the store decides on the state it
// expects the key's row to hold (the last it saw), at the instant it
// expects the server's clock to read, and the function writes the new
// state only if the row still holds the expected state and the instant
// lies within [Config.MaxLag] before the server's clock
// (clock_timestamp()); otherwise it writes nothing and returns the row
// and the clock, and the store decides again. So decisions are exact and
// atomic across processes, on the server's clock, and a batch
// ([Store.ApplyAll], a core.Stack) is one call, all or nothing. A
// process's calls for one key take turns, so that only other processes'
// writes make a call decide again.
//
// Idle keys expire: each row carries the instant from which it decides as
// a fresh key would, and [Store.Sweep] deletes the rows past it.
// docs/stores.md says what the table costs the database.
//
// Errors a server gives every call while it stays as it is (connection
// exceptions, too many connections, admin shutdown, statement timeout,
// read-only transactions: see [Unavailable]) are marked with
// core.ErrUnavailable, which package policy's breaker counts as the
// store's failure.
package pgstore
