package compare

import (
	"os/exec"
	"runtime"
	"syscall"
)

// startChild starts cmd with SIGKILL as its parent-death signal and
// returns a channel closed once the child has exited and been reaped.
//
// Linux sends the parent-death signal when the thread that forked the
// child ends, not when the process does, and the Go runtime may end or
// reuse threads at will. So the child is forked from a goroutine locked
// to its thread, which then waits for the child on that thread: the
// thread outlives the child, and the child dies with the test binary
// however that ends. The goroutine returns still locked once the child
// is reaped, and the runtime ends its thread.
func startChild(cmd *exec.Cmd) (<-chan struct{}, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return startAndWait(cmd, runtime.LockOSThread)
}
