// Package cputime reads the CPU time the process has used, for benchmarks
// that report it per decision: on a machine whose cores a benchmark
// shares with the Redis server it drives, the CPU a layer costs is a
// steadier figure than the decisions a second it allows, which the
// scheduler moves from one run to the next.
package cputime
