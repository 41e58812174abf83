// Package spawn starts the servers of sluice's test kits (redistest,
// pgtest, mysqltest) as child processes that are stopped by PID, never by
// name, and picks the ports they listen on.
//
// [Start] starts a command so that it dies with the test binary (on Linux,
// with a parent-death signal) and reaps it on a goroutine of its own; the
// [Process] it returns is signalled, killed and waited on by PID.
// [FreePort] picks a port of 127.0.0.1 that was free a moment ago, below
// the kernel's range of ephemeral ports where it can, so that a server
// killed and restarted on the same port does not find it taken by some
// client's connection. [Process.WaitReady] polls a server until it
// answers, [Copy] makes a server's directory from a template made once,
// and [Tail] quotes its log in an error. The package imports nothing of
// sluice, so that a public test kit may use it.
package spawn
