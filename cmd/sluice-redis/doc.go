// Sluice-redis is the sluice command with the subcommands that talk to
// your Redis, inspect and bench, besides sim. They are a build of their
// own because they link go-redis and rueidis, which cmd/sluice leaves
// out so that "go run ./cmd/sluice sim" compiles quickly:
//
//	go run ./cmd/sluice-redis inspect -redis localhost:6379 user:42
//	go install github.com/sluicehq/sluice/cmd/sluice-redis@latest
//
// Their flags are in docs/options.md; "sluice-redis help inspect" lists
// them. For sim, see cmd/sluice.
//
// # inspect
//
// Inspect reads a key's state from Redis as the Redis stores keep it
// (the Redis key, the state's fields, its entries and TTL, on the
// server's clock) and, given -limit, peeks at the decision a request of
// cost 1 would get now, charging nothing:
//
//	go run ./cmd/sluice-redis inspect -redis localhost:6379 -limit 10/s -burst 50 user:42
//
// -algorithm names the algorithm (a stack's rule as algorithm/rule),
// -prefix the store's key prefix, -cluster says the addresses are a
// Cluster's.
//
// # bench
//
// Bench makes decisions against your own Redis for -duration from
// -concurrency goroutines, on -keys keys (1: one hot key), through
// rueidisstore or redisstore (-client), printing progress each
// second, then the throughput, the share admitted, latency percentiles
// and the script calls the server counted per decision:
//
//	go run ./cmd/sluice-redis bench -redis localhost:6379 -concurrency 64 -duration 10s
//
// # Exit status
//
// As cmd/sluice's: 0 on success, 1 when a command fails while running (a
// Redis it cannot reach), 2 on bad usage.
package main
