package spawn

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"
)

// Process is a child process started by [Start]. Its methods are safe for
// concurrent use.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd.Wait has reaped the process
}

// Start starts cmd so that it dies with the test binary, even one that
// crashes before it can stop it (on Linux only: elsewhere there is no
// parent-death signal), and reaps it on a goroutine of its own. It keeps
// cmd.SysProcAttr's other fields, such as a Credential. The caller must
// not call cmd.Wait; it waits on [Process.Done].
func Start(cmd *exec.Cmd) (*Process, error) {
	if err := start(cmd); err != nil {
		return nil, err
	}
	p := &Process{cmd: cmd, done: make(chan struct{})}
	go func() {
		cmd.Wait() // the exit status of a killed server says nothing
		close(p.done)
	}()
	return p, nil
}

// Run starts cmd as [Start] does and waits until it exits, returning
// cmd.Wait's error: for a short-lived tool, such as a server's CLI.
func Run(cmd *exec.Cmd) error {
	if err := start(cmd); err != nil {
		return err
	}
	return cmd.Wait()
}

// PID returns the process's id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Done returns a channel closed once the process has exited and been
// reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited and been reaped.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// State returns the exited process's state, or nil while it runs.
func (p *Process) State() *os.ProcessState {
	if !p.Exited() {
		return nil
	}
	return p.cmd.ProcessState
}

// Signal sends sig to the process. It returns [os.ErrProcessDone] if the
// process has been reaped.
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// WaitFor waits at most d for the process to exit and reports whether
// it did.
func (p *Process) WaitFor(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

// ErrExited marks [Process.WaitReady]'s error when the process exited
// before it was ready.
var ErrExited = errors.New("exited")

// WaitReady calls probe until it returns nil, every interval, and then
// returns nil: a server is ready when probe finds it answering, and
// answering as itself (its PID, its data directory), not as another
// process's server that took the port. If the process exits first,
// WaitReady returns an error wrapping [ErrExited] that says how it
// exited; if timeout passes first, one wrapping probe's last error.
func (p *Process) WaitReady(timeout, interval time.Duration, probe func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := probe()
		if err == nil {
			return nil
		}
		if p.WaitFor(interval) {
			return fmt.Errorf("%w: %v", ErrExited, p.State())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d not ready after %v: %w", p.PID(), timeout, err)
		}
	}
}

// Kill kills the process at once (SIGKILL) and waits until it is reaped.
// Killing a process that has already exited does nothing and returns nil.
func (p *Process) Kill() error {
	err := p.cmd.Process.Kill()
	<-p.done
	if err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill pid %d: %w", p.PID(), err)
	}
	return nil
}
