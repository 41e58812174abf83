// Package mysqlstore keeps limiter state in MariaDB or MySQL (InnoDB),
// through a database/sql pool of go-sql-driver/mysql. It is a module of
// its own, so that the driver stays out of sluice's main module.
//
// It is an adapter on package casstore, sluice's kit for databases: the
// store is a casstore.Store, which decides every algorithm by its Go
// transition, and whose one demand of a database, a compare-and-swap of
// a batch of keys' states on the server's clock, is here a transaction
// at READ COMMITTED: the rows locked in key order (SELECT … FOR UPDATE,
// with the server's SYSDATE), compared with what the store expected,
// and written only if every one holds it and the decision's instant lies
// within [casstore.Config.MaxLag] before the server's clock. A decision that
// writes nothing (a denial, a peek) is one SELECT. So decisions are
// exact and atomic across processes, on the server's clock, and a batch
// (ApplyAll, a sluice.Stack) is one transaction, all or nothing.
//
// A charge takes about five round trips where pgstore's function takes
// one: MySQL has no array parameters for a stored procedure to take a
// batch in. docs/stores.md compares the two. Give the driver
// interpolateParams=true in its DSN, or it prepares each statement
// first, a round trip more each.
//
// Errors a server gives every call while it stays as it is are marked
// with core.ErrUnavailable (see [Unavailable]).
package mysqlstore
