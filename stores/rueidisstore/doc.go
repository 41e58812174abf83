// Package rueidisstore keeps sluice's limiter state in Redis through
// rueidis, so that every instance of a service shares one budget per key.
//
// It decides exactly as [github.com/sluicehq/sluice/stores/redisstore]
// does, with the same scripts and keys, so the two can share state; it
// differs in the client. rueidis pipelines the commands of concurrent
// callers on a few shared connections, which under load sends many
// decisions in one write and lets Redis answer them in one read: the
// fastest way sluice has to a shared limit. Each decision is still one
// EVALSHA of the algorithm's Lua twin (see [algorithms.Script]), atomic, on the
// server's clock unless the request carries its own Now.
//
// rueidis never retries a command that is not read-only, so a decision
// whose reply timed out is never replayed; the store replays only an
// EVALSHA that Redis answers NOSCRIPT, once, as EVAL. [ClientOption]
// returns the client options docs/redis.md recommends, among them [Dial]
// as the client's DialCtxFn:
// rueidis makes the calls that arrive while it dials wait for the dial,
// whatever their contexts say, and Dial keeps a server that never
// answers from holding them a second.
package rueidisstore
