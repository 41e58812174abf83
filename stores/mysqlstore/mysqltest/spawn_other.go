//go:build unix && !linux

package mysqltest

import "os/exec"

// startProcess starts cmd. Outside Linux there is no parent-death
// signal, so a server outlives a test binary that crashes before
// stopping it.
func startProcess(cmd *exec.Cmd) error { return cmd.Start() }
