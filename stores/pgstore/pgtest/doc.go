// Package pgtest starts real PostgreSQL servers for tests: each [Start]
// runs initdb (once per test binary, copied for every later server) and
// postgres in a temporary directory of its own, listening on 127.0.0.1
// at a free port, never the standard one, and stops it by PID when the
// test ends. [Server.Kill], [Server.Stop] and [Server.Restart] let a test
// provoke outages. It needs PostgreSQL's server binaries (Debian's
// postgresql package): pgtest looks for them on PATH and under
// /usr/lib/postgresql/*/bin.
//
// PostgreSQL refuses to run as root. A test binary running as root runs
// initdb and postgres as the unprivileged user "postgres", or "nobody"
// if there is none, and gives it the server's directory.
//
// The servers are tuned for tests, not for durability: fsync and
// full-page writes are off, so a commit survives a killed server (the
// operating system still holds its WAL) but not a crash of the machine.
// Everything else is PostgreSQL's default unless a test says otherwise
// with [WithSetting].
package pgtest
