// Package classifytest provokes, on real redis-servers, each failure of
// the table in docs/outages.md ("How failures are classified"), through
// a Redis store, and checks how sluice classifies it: a store failure
// (marked with core.ErrUnavailable, counted by policy.IsStoreFailure and
// answered by a breaker's mode) or the request's error (returned to the
// caller, never counted), and the error.type telemetry.ErrorType reports.
// redisstore's and rueidisstore's tests run the same rows, each through
// stores on its own client.
//
// [Run] provokes the failures of a single server: missing permissions,
// wrong credentials, a failed TLS handshake, a server out of memory,
// busy, loading, read-only, cut off from its primary, short of replicas,
// refusing writes, gone; a script's error, a malformed reply, WRONGTYPE.
// [RunCluster] provokes a Cluster's: MOVED, CROSSSLOT, TRYAGAIN, a storm
// of redirections, CLUSTERDOWN. [CheckBreaker] checks that a breaker over
// a failing store returns no error to its callers and counts the failures.
//
// Every row starts servers of its own (a row changes its server's state
// for good), and fails the test, rather than skip, when redis-server
// lacks what a row needs, such as TLS.
package classifytest
