//go:build unix && !linux

package pgtest

import "os/exec"

// startProcess starts cmd. Outside Linux there is no parent-death
// signal, so a server outlives a test binary that crashes before
// stopping it.
func startProcess(cmd *exec.Cmd) error {
	return cmd.Start()
}

// children returns nothing: without /proc, Kill kills the postmaster
// alone, and its backends exit when they notice.
func children(int) []int { return nil }
