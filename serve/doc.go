// Package serve is sluice as a rate-limit service: Envoy's RLS v3 API
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) over any
// sluice store chain, configured in envoyproxy/ratelimit's own YAML
// format (package [github.com/sluicehq/sluice/serve/limits]), so that an
// Envoy, Istio or Envoy Gateway deployment switches by pointing its
// rate-limit cluster at it.
//
// [Service] is the RLS service: it matches each request's descriptors
// against the limits in force and decides all of them as one atomic
// stack, so a request over any of its limits charges none. [Server] runs
// it: the gRPC port with the gRPC health service, envoyproxy/ratelimit's
// HTTP port (/healthcheck and /json, answered as the peer answers them), a
// debug HTTP port (/healthz, /metrics, /limits), configuration reloading
// that keeps the previous limits when a new file is invalid, and a
// graceful stop. The program sluice-serve, built from this module
// (serve/cmd/sluice-serve), is the usual way to run it:
//
//	sluice-serve -config limits.yaml -redis 127.0.0.1:6379
//
// This package lives in its own module, github.com/sluicehq/sluice/serve,
// so that gRPC and Envoy's protos stay out of the library's. See
// docs/serve.md for running it next to Envoy, migrating from
// envoyproxy/ratelimit and operating it.
package serve
