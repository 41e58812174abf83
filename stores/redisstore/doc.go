// Package redisstore keeps sluice's limiter state in Redis through go-redis
// v9, so that every instance of a service shares one budget per key.
//
// Each decision is one EVALSHA of the algorithm's Lua twin (see
// [algorithms.Script]): the twin runs the same integer arithmetic as the Go
// transition, atomically, on the server's clock unless the request carries
// its own Now. Concurrent callers across a fleet therefore never admit
// more than the limit, and a decision on Redis equals the one memstore
// would make. The store works with any [redis.UniversalClient]: a single
// server, Sentinel, or Redis Cluster.
//
// Keys are laid out as prefix + "{" + key + "}:" + algorithm, the user's
// key being the Cluster hash tag with its braces escaped, so that no key
// can choose another's slot; keys whose escaped form passes 128 bytes are
// stored by their SHA-256. Every write sets a TTL of the time until the
// key is fully recovered plus a second.
//
// A call that fails is never replayed, except EVALSHA that Redis answers
// NOSCRIPT (after a restart, failover or SCRIPT FLUSH), which is sent once
// more as EVAL: a missing script ran nothing. The store marks its commands
// so that go-redis does not retry them either, whatever the client's
// MaxRetries: a decision whose reply timed out may have been applied.
// [ClientOptions] returns the client options docs/redis.md recommends.
//
// The two Redis stores are one engine over two clients: this package is
// its go-redis adapter, and rueidisstore its rueidis adapter. On a server
// whose Lua lacks Redis's struct library (miniredis), the store sends
// each script's portable form (algorithms.Script.Portable), which decides
// alike.
package redisstore
