package redistest

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// spawner is the goroutine that starts every child process. The kernel sends
// a child its parent-death signal when the thread that forked it exits, not
// when the process does (prctl(2), https://go.dev/issue/27505), and Go
// terminates a thread whose locked goroutine returns. So children are forked
// from one goroutine that locks its thread and never returns: the thread, and
// so every child's Pdeathsig, lasts exactly as long as the test binary.
var spawner struct {
	once sync.Once
	reqs chan func()
}

// startProcess starts cmd on the spawner's thread with Pdeathsig SIGKILL, so
// that the child dies with the test binary even if the binary crashes or is
// killed before it can stop the child.
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
