// Package mysqltest starts real MariaDB (or MySQL) servers for tests:
// each [Start] runs mariadb-install-db (once per test binary, copied for
// every later server) and mariadbd in a temporary directory of its own,
// listening on 127.0.0.1 at a free port, never the standard one, and
// stops it by PID when the test ends. [Server.Kill] and [Server.Restart]
// let a test provoke an outage. It needs the server's binaries (Debian's
// mariadb-server package) on PATH or in /usr/sbin.
//
// A test binary running as root runs the server as root too
// (mariadbd --user=root): the server's directory is the test's own.
//
// The servers are tuned for tests, not for durability: the binary log is
// off and InnoDB writes its log at commit without flushing it.
package mysqltest
