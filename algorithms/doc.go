// Package algorithms holds sluice's rate-limiting algorithms, each a pure
// transition over a [core.State] in integer microseconds:
//
//   - [TokenBucket]: a bucket of Burst tokens refilled at Rate per Period.
//     Allows bursts, then a steady rate.
//   - [GCRA]: the generic cell rate algorithm. Decides exactly as the token
//     bucket does under a fixed limit, keeping one instant instead of a
//     level.
//   - [FixedWindow]: Rate per epoch-aligned window of one Period. Cheapest,
//     but admits up to 2×Rate across a window boundary.
//   - [SlidingWindowCounter]: the current and previous fixed windows'
//     counts, the previous one weighted by its share of a sliding window.
//     Smooths the boundary at the cost of an approximation.
//   - [SlidingWindowLog]: every charge of the last Period. Exact, with
//     memory proportional to the rate (at most [MaxLogRate]).
//
// The bucket algorithms admit at most Burst at once; the window algorithms
// admit at most Rate per window and take no notice of the burst. Denied
// requests charge nothing under every algorithm. A cost above the capacity
// is unsatisfiable: the state is left unchanged. A state's clock never runs
// backwards: each algorithm decides at max(now, the last charge). And every
// state records when the key will have fully recovered from its last charge
// ([core.State].E); from then on the key is decided as a fresh one, so a
// store that forgets it then changes no decision.
//
// Every decision reports the key's exact level after it
// ([core.Decision].Level): a bucket's tokens, in the limit's units per
// token and below zero while reservations are owed; what a window still
// admits, in whole costs, or for the sliding window counter in periods
// of a token, its previous window weighing by fractions; a concurrency
// limit's free slots. And after a step of cost 0 a decision's Remaining
// is the largest cost the algorithm admits at that instant, which is how
// a partial admission ([core.OpAtMost]) finds what to charge, with no
// code of the algorithm's own.
//
// All arithmetic is on integers that stay below 2^53 (see [core.MaxExact]),
// so that each algorithm's Lua twin, run inside Redis where numbers are
// doubles, reaches exactly the same decision; limits that would break that
// bound are rejected by [core.Limit.Validate] and each algorithm's
// Validate. Each algorithm's documentation says what its State fields hold
// and what it does when a key's limit changes.
//
// [Concurrency] is of another kind: it limits how many leases a key holds
// at once rather than a rate, and is used through sluice.Limiter's Acquire.
package algorithms
