// Package loadgen drives an Envoy rate-limit service (RLS v3,
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) as hard as
// a fixed number of callers can, and measures what it answered and how
// fast.
//
// [Run] keeps [Config.Streams] RPCs in flight over a few HTTP/2
// connections (a closed loop: each worker sends its next request when the
// previous one is answered), first for a warmup and then for the measured
// duration, and returns a [Result]: the answers by overall code, the
// failed RPCs, decisions per second and latency percentiles from a
// log-linear histogram that each worker fills without allocating. What a
// worker sends is a function of its index and its count of RPCs; a
// [Workload] of prebuilt requests, one per key, is the usual one, and
// [SampleConfig] is a configuration in envoyproxy/ratelimit's YAML format
// that limits its keys. Every goroutine Run starts has ended when it
// returns.
//
// It speaks gRPC with a client of its own, plaintext and unary only,
// rather than grpc-go's: the load generator shares the cores of the
// servers it measures, and grpc-go's client cost it about 18 µs of CPU a
// call against sluice-serve, this one about 6, since it keeps no
// goroutine per call and gathers the calls of a moment into one write.
//
// The package is the measuring apparatus of sluice-serve's comparison
// with envoyproxy/ratelimit (serve/compare) and of the rlsload command,
// which points it at any RLS server.
package loadgen
