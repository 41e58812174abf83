//go:build unix && !linux

package pgtest

import (
	"os/exec"
	"syscall"
)

// startProcess starts cmd in a process group of its own, which
// [Server.Kill] kills whole. Outside Linux there is no parent-death
// signal, so a server outlives a test binary that crashes before
// stopping it.
func startProcess(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd.Start()
}
