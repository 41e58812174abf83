// Package redistest runs real Redis servers for tests: redis-server
// processes, and Redis Clusters of three masters, that belong to the test
// binary and to nobody else.
//
// [Start] and [StartCluster] give a test servers of its own. Each server is
// a redis-server child process listening on 127.0.0.1 on a port that was
// free a moment before (the start is retried on a new port if another
// process takes it first), without persistence and with replicas synced
// at once (repl-diskless-sync-delay 0), in a temporary directory
// that holds its log. Start returns once the server answers PING, and
// t.Cleanup stops it by its PID, never by name, and removes the directory.
// [Server.Kill], [Server.Stop] and [Server.Restart] are for fault tests.
// [Server.Do] is a minimal RESP2 client, enough to set up and inspect state
// without a Redis library. [NewProxy] puts a TCP proxy in front of a
// server, to blackhole its connections or delay its replies. [WithUser]
// adds ACL users, and [WithTLS] a TLS port whose certificate a test's own
// [CA] signed, for tests of permissions and handshakes; [WithClientAuth]
// makes that port require a client certificate ([CA.ClientCertificate]).
// [StartSentinel] starts a Sentinel set (a primary, a replica and three
// sentinels) whose primary a test can kill and wait to see replaced.
// [Cluster.Reshard] moves slots between a Cluster's masters with
// redis-cli --cluster reshard, as an operator does, for tests of ASK,
// MOVED and TRYAGAIN under load.
//
// Starting a cluster takes 2 to 3 seconds, so a package can share one
// server and one cluster among all its tests: [Shared] and [SharedCluster]
// start them on first use, and [Main], called from TestMain, stops them when
// the tests are done. Tests that share a server use distinct key prefixes
// and never FLUSHALL.
//
// The package never connects to a Redis it did not start, such as the
// machine's own on port 6379. On Linux every server is started with a
// parent-death signal, so it dies with the test binary even if the binary
// crashes. The tests fail, rather than skip, when redis-server or redis-cli
// is missing; Debian's packages are redis-server and redis-tools.
package redistest
