// Package composetest checks that sluice's decorators compose: that the
// production chain
//
//	telemetry → policy → breaker → layered → backend
//
// is still a store that keeps every promise of core.Store, and that a
// sluice.Stack over it is decided in one backend call, one Redis script
// call, per decision. It holds tests only.
//
// Each test builds the chain as a user would, from each package's own
// constructor: telemetry.New with no-op OpenTelemetry providers,
// policy.New with an allow list and a deny list that match none of the
// tests' keys (so that its per-rule bookkeeping runs on every batch),
// policy.NewBreaker with a per-call deadline long enough that a loaded
// test machine never trips it, layered.New with its default deny cache,
// and, right above the backend, a storetest.Counter that counts what
// reaches it. The backends are memstore, redisstore and rueidisstore on a
// single redis-server, and redisstore and rueidisstore on a Redis Cluster
// of three masters, all started by package redistest.
//
// The tests:
//
//   - the conformance suite (storetest.Run) through the chain over every
//     backend, with storetest.InTurn on a Cluster, whose stores decide a
//     batch of keys in different slots in turn;
//   - a three-rule stack (per user, per tenant, global) making N decisions
//     on a Redis of the test's own: the Counter sees N ApplyAll calls and
//     no Apply, and the server's INFO commandstats N EVALSHA and no EVAL;
//     a decorator that decided batches in turn (stores.ApplyInTurn) would
//     show 3N Apply calls and 3N script calls;
//   - Stack.Wait from 64 goroutines through the chain on Redis, with a
//     per-user rule and a tighter shared one: admissions follow the
//     shared rule's rate within 1 %, and the server runs one script per
//     reservation, as docs/composition.md describes for Limiter.Wait;
//   - the chain over a memstore behind a storetest.Faulty inside a
//     testing/synctest bubble: a stack's Wait through every layer returns
//     after exactly its delay on the bubble's clock, an outage is
//     answered by the breaker's mode, and closing the chain ends every
//     goroutine (docs/testing.md).
package composetest
