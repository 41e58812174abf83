package compare

import "os/exec"

// startAndWait starts cmd from a new goroutine, which first calls
// prepare and then waits for cmd; the returned channel is closed once
// cmd has exited and been reaped.
func startAndWait(cmd *exec.Cmd, prepare func()) (<-chan struct{}, error) {
	errc := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		prepare()
		if err := cmd.Start(); err != nil {
			errc <- err
			return
		}
		errc <- nil
		cmd.Wait() // how a stopped server exited says nothing
		close(done)
	}()
	if err := <-errc; err != nil {
		return nil, err
	}
	return done, nil
}
