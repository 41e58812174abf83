// Package stores is for those who write a store or a decorator: the
// helpers the [core.Store] contract asks for. The stores themselves are
// in its subpackages: memstore (in process), redisstore and rueidisstore
// (Redis through go-redis and rueidis), layered (a local cache in front
// of a remote store), casstore (a store on any database that can compare
// and swap a batch of keys' states, which pgstore and mysqlstore adapt),
// and storetest, the conformance suite every store runs.
//
// A store implements core.Store's four methods. [ValidateAll] checks a
// batch before ApplyAll touches any state; a store that cannot decide a
// batch atomically returns [ApplyInTurn] from its ApplyAll, by name, so
// that the fallback is visible in code; [Func] turns a function into a
// store, for tests. docs/architecture.md explains the contract and what
// each of sluice's decorators does with a batch.
package stores
