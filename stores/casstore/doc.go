// Package casstore is the kit for bringing a database to sluice: a
// [core.Store] built on the one thing it asks of the database, a
// compare-and-swap of a batch of keys' states on the database's clock
// ([Backend]). An adapter implements the Backend's three methods (Swap,
// Delete, Expire) in its database's terms; the [Store] does the rest:
//
//   - it decides every algorithm by its Go transition (core.Run,
//     core.RunAll), the specification, on the state it expects each key
//     to hold: the last it saw, kept for a bounded number of keys;
//   - at its estimate of the backend's clock (the local monotonic clock
//     plus the offset the last reply showed), which the backend confirms
//     lies within MaxLag before its own;
//   - and asks the backend to swap the states it expected for the new
//     ones, all or none: a decision or a batch (ApplyAll, a sluice.Stack)
//     is one Swap. On a mismatch the backend returns what it found and
//     its clock, and the store decides again on them;
//   - a process's calls that wait while MaxSwaps Swaps are in flight are
//     decided together, in turn, with one Swap for the group (a group
//     commit), so that under load a decision costs a fraction of a round
//     trip, on a hot key or on many keys; a process swaps a key once at a
//     time, so that only other processes make a call decide again;
//   - it validates requests before they reach the backend, heals states
//     it cannot read, computes each state's expiry and sweeps idle keys
//     ([Store.Sweep]), and counts its calls ([Store.Stats]).
//
// So every guarantee of a sluice store (exact decisions across processes,
// batches all or nothing, the backend's clock, Reset and Close) follows
// from the contract, and the conformance suite (storetest.Run) passes on
// a Backend that is a map under a mutex. Package pgstore is the adapter
// for PostgreSQL: Swap is one call of a PL/pgSQL function. docs/stores.md
// walks a store author through the contract.
package casstore
