// Package redisfaults holds the fault tests that redisstore and
// rueidisstore share: the checks that a Redis store survives a server that
// forgets its scripts, a server that cannot answer in time, and scripts
// whose replies break the calling convention. Each store's fault_test.go
// supplies its client and what differs between clients (how to open its
// connections before a call that must time out, how to count what it
// sends, and the expectations that differ), and calls these helpers.
//
// [FlushUnderLoad] decides from many goroutines while SCRIPT FLUSH empties
// the server's script cache. [PausedCall] and [BusyCall] make a call that
// times out while the server is paused by CLIENT PAUSE or busy in another
// client's script, and report how many times the decision was applied, so
// that a test can tell a call never sent, applied once or replayed.
// [MalformedCases] and [CheckMalformed] run scripts whose replies are not a
// decision; [CheckUnsupported], an algorithm without a Lua twin.
// [CheckSentinelFailover] kills a Sentinel set's primary under load, with
// a breaker in each mode in front of the store, and measures the
// recovery, the errors callers saw and what was admitted.
//
// The helpers take the server as a [redistest.Server] and the store as a
// [core.Store]; they know no Redis client. Those that need a server of the
// test's own, because SCRIPT FLUSH and CLIENT PAUSE reach every client,
// say so. They fail the test through t, and mark themselves with t.Helper,
// so that a failure or a log names the line of the calling test.
package redisfaults
