//go:build !linux

package spawn

import "os/exec"

// start starts cmd. Outside Linux there is no parent-death signal, so a
// server outlives a test binary that crashes before stopping it.
func start(cmd *exec.Cmd) error { return cmd.Start() }

// Children returns nil: without /proc the package cannot list a
// process's children.
func Children(int) []int { return nil }

// ephemeralLow returns 0: outside Linux the package cannot tell the
// kernel's ephemeral range.
func ephemeralLow() int { return 0 }
