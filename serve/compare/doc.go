// Package compare sets sluice-serve beside envoyproxy/ratelimit, the
// reference implementation of Envoy's rate-limit service, on the same
// machine and the same redis-server.
//
// The harness builds both servers with the Go toolchain, once per test
// binary ([PeerBinary], [SluiceBinary]): the peer at the version this
// module's go.mod pins, sluice from the serve module next door. [StartPeer]
// and [StartSluice] start one on free ports of 127.0.0.1 against a given
// Redis, reading the same envoyproxy/ratelimit-format YAML, wait until it
// is ready, and stop it by PID when the test ends; each [Server] reports
// its CPU time. [CommandStats] counts the commands Redis executed.
//
// The package's tests are the comparison. TestCompat sends both servers
// the same sequences of requests and checks that their answers agree,
// field by field, except where they differ by design; the list of those
// differences is in compat_test.go. TestSideBySide (run by ./run, not by
// go test alone) measures both under the same load and writes
// docs/serve-compare.md.
package compare
