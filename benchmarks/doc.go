// Package benchmarks compares sluice with the rate limiters Go users would
// pick instead, on one real Redis and in memory, in the same run.
//
// It is a module of its own, so that the other libraries never enter
// sluice's go.mod. Its non-test code is the contenders: [RedisContenders]
// returns sluice's Redis stores, sluice's production chain over each of
// its two Redis stores ([Chains]: what users deploy, compared with its
// bare store, not counted as a peer), go-redis/redis_rate,
// throttled/throttled, ulule/limiter and three reference token buckets
// (one script, three commands decided in the client, and WATCH/MULTI),
// each on its own client with default options; [MemoryContenders] returns memstore,
// golang.org/x/time/rate keyed by a sync.Map, sethvargo/go-limiter,
// throttled's memstore and ulule/limiter's memory store. Every contender
// is given the same [Limit] and answers one question: may this key make one
// request now?
//
// The benchmarks and tests (the Redis ones start their own redis-server):
//
//	BenchmarkRedis          hot key and 10,000 users, 1 to 256 goroutines,
//	                        and the server's ceiling for sluice's script at 64
//	                        in every round ([CeilingCell])
//	BenchmarkMemory         hot key, 10,000 users and 100,000 random keys
//	BenchmarkDistinct1M     a million keys never seen before
//	BenchmarkDirect         memstore and go-limiter called directly, hot key
//	                        (not run by bench-compare)
//	BenchmarkLayers         the production chain's layers added one by one
//	                        over each Redis store, hot key, 64 goroutines
//	                        (not run by bench-compare)
//	BenchmarkLayerCost      the same layers over a store that answers at
//	                        once: each layer's own CPU per decision (not
//	                        run by bench-compare)
//	TestOverGrant           64 goroutines against 10/s, burst 10, for 3 s
//	TestCommandsPerDecision the commands each client sends, through a proxy
//	TestCeiling             the server's EVALSHA ceiling for sluice's script
//	                        and a reference one (-ceiling)
//
// `make bench-compare` at the repository's root runs them all (the script
// is benchmarks/run) and rewrites docs/benchmarks.md's tables and charts
// with the report command in benchmarks/report.
package benchmarks
