// Package pgstore keeps limiter state in PostgreSQL, through a pgx v5
// pool: a [core.Store] for a fleet that has a PostgreSQL server and no
// Redis. It is a module of its own, so that pgx stays out of sluice's
// main module.
//
// It is an adapter on package casstore, sluice's kit for databases: the
// store is a casstore.Store, which decides every algorithm by its Go
// transition (core.Run and core.RunAll, the specification, as in
// memstore), and whose one demand of a database, a compare-and-swap of a
// batch of keys' states on the server's clock, is one call of a PL/pgSQL
// function the store creates beside its table. The function writes the
// new states only if every row still holds the state the store expected
// and the decision's instant lies within [casstore.Config.MaxLag] before the
// server's clock (clock_timestamp()); otherwise it writes nothing and
// returns the rows and the clock, and the store decides again. So
// decisions are exact and atomic across processes, on the server's
// clock, and a batch (ApplyAll, a sluice.Stack) is one call, all or
// nothing.
//
// Idle keys expire: each row carries the instant from which it decides as
// a fresh key would, and Sweep deletes the rows past it. docs/stores.md
// walks through the function and says what the table costs the
// database.
//
// Errors a server gives every call while it stays as it is (connection
// exceptions, too many connections, admin shutdown, statement timeout,
// read-only transactions: see [Unavailable]) are marked with
// core.ErrUnavailable, which package policy's breaker counts as the
// store's failure; a connection broken mid-call is one too.
package pgstore
