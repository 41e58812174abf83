// Sluice is the command-line tool of the sluice rate-limiting framework.
//
// Usage:
//
//	sluice <command> [flags]
//
// The commands are:
//
//	sim      run a traffic pattern through an algorithm and report what it admits
//	inspect  print a key's state and TTL in Redis (in sluice-redis)
//	bench    measure decisions against your Redis (in sluice-redis)
//	serve    serve Envoy's rate-limit API (in sluice-serve, of the serve module)
//	help     list the commands, or show one command's flags (sluice help sim)
//
// # sim
//
// Sim replays a traffic pattern against one algorithm and one limit on the
// in-memory store ([github.com/sluicehq/sluice/stores/memstore]), for one
// key, on a virtual clock: no time passes and every run of the same flags
// prints the same numbers. It prints a table with one row per interval —
// requests sent, admitted and rejected, and the level, the capacity left
// at the interval's end — then totals and a summary, and with -chart it
// also writes the same intervals as an SVG chart. -algorithm all (or a
// comma list) runs several algorithms on the same -traffic in one table and
// one chart: the quickest way to see how they differ.
//
//	go run ./cmd/sluice sim -algorithm fixed-window -traffic constant:60/s
//	go run ./cmd/sluice sim -traffic onoff:60/s,2s,3s -duration 60s -interval 100ms -chart sim.svg
//
// The traffic patterns are constant:RATE, burst:N/PERIOD,
// onoff:RATE,ON,OFF and trace:FILE; a rate or limit is N/s, N/min, N/h,
// N/day or N/<Go duration>. With no flags, sim runs the worked example of
// docs/sim.md: a token bucket of 10 req/s with a burst of 50, sent 60
// requests at the top of every second for 5 seconds.
//
// -downstream models the service behind the limiter (a capacity, a
// latency at rest, a queue beyond capacity, and -capacity-change over
// time), and -adapt aimd or gradient lets an adaptive controller
// ([github.com/sluicehq/sluice/adaptive]) set the limit from its latency;
// the table and the chart then show the adapted limit against the true
// capacity:
//
//	go run ./cmd/sluice sim -traffic constant:400/s -downstream 200/s -capacity-change 30s:100/s -adapt gradient -duration 60s
//
// -queue and -max-delay shape the traffic instead (token bucket and GCRA):
// each request reserves its turn ([github.com/sluicehq/sluice/sluice.Limiter.WithQueue])
// and waits in line, or is refused at once when the line is full or the
// wait too long; the table adds what left the line in each interval and
// the line's length, and the summary the gaps between releases:
//
//	go run ./cmd/sluice sim -algorithm gcra -limit 10/s -burst 1 -traffic burst:30/2s -queue 20 -duration 12s
//
// # inspect and bench
//
// Inspect (a key's state in Redis) and bench (decisions against your
// Redis) are built from cmd/sluice-redis, which links the Redis clients
// this build leaves out so that sim compiles quickly; here they say so
// and exit 2:
//
//	go run ./cmd/sluice-redis inspect -redis localhost:6379 -limit 10/s -burst 50 user:42
//
// # Exit status
//
// Every command exits 0 on success, 1 when it fails while running (a chart
// it cannot write, a Redis it cannot reach), and 2 on bad usage: an unknown command, or a flag value
// it cannot use, reported on one line of standard error.
package main
