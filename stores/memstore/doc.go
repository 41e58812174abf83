// Package memstore is sluice's in-process store: the algorithms' Go
// transitions run under a lock per shard of a hashed key space.
//
// It is bounded: at most [Config].MaxKeys keys are held, and a key flood
// evicts the keys whose state is nearest a fresh key's, counting what it
// evicts ([Store.Stats]). It is exact about what it forgets: a key's state
// expires once the algorithm says it decides as a fresh key would, and a
// sweeper goroutine removes expired keys until [Store.Close] stops it. The
// clock is injectable ([Config].Now), for simulations and tests.
//
// On the hot path, [Store.Apply] on a key it holds allocates nothing.
package memstore
