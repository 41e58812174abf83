//go:build linux

package mysqltest

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// spawner is the goroutine that starts every server. The kernel sends a
// child its parent-death signal when the thread that forked it exits, not
// when the process does (prctl(2), https://go.dev/issue/27505), so
// servers are forked from one goroutine that locks its thread and never
// returns: each server dies with the test binary, even one that crashes
// before it can stop it.
var spawner struct {
	once sync.Once
	reqs chan func()
}

// startProcess starts cmd on the spawner's thread, with SIGKILL as its
// parent-death signal.
func startProcess(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	spawner.once.Do(func() {
		spawner.reqs = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked; see spawner
			for f := range spawner.reqs {
				f()
			}
		}()
	})
	errc := make(chan error, 1)
	spawner.reqs <- func() { errc <- cmd.Start() }
	return <-errc
}
