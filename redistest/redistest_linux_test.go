package redistest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// prSetChildSubreaper is prctl's PR_SET_CHILD_SUBREAPER, which package
// syscall lacks.
const prSetChildSubreaper = 36

// TestServerDiesWithBinary runs this test binary again as a helper that
// starts a server from a goroutine whose thread then exits, checks that the
// server survived that, and exits without stopping it, as a crashed binary
// would: the parent-death signal must then kill the server. This process
// becomes a subreaper so that the orphaned server is reparented to it and
// its end can be observed, and reaped, here.
func TestServerDiesWithBinary(t *testing.T) {
	if os.Getenv("REDISTEST_HELPER") == "1" {
		helperStartAndExit()
		return
	}
	// Not parallel: being a subreaper is a property of the whole process,
	// and another run of this test (-count) must not unset it meanwhile.
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		t.Fatalf("prctl(PR_SET_CHILD_SUBREAPER): %v", errno)
	}
	t.Cleanup(func() { syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 0, 0) })

	cmd := exec.Command(os.Args[0], "-test.run=^TestServerDiesWithBinary$", "-test.count=1")
	// Under the race detector a binary sleeps a second before it exits,
	// unless told not to.
	gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	cmd.Env = append(os.Environ(), "REDISTEST_HELPER=1", "GORACE="+gorace)
	out, err := cmd.CombinedOutput()
	var pid int
	var dir string
	for line := range strings.Lines(string(out)) {
		fmt.Sscanf(line, "helper: pid %d dir %s", &pid, &dir)
	}
	if dir != "" {
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	if err != nil || pid == 0 {
		t.Fatalf("helper: %v\n%s", err, out)
	}

	deadline := time.Now().Add(5 * time.Second)
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		switch {
		case got == pid:
			if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Errorf("server pid %d ended with status %#x, want killed by SIGKILL", pid, ws)
			}
			return
		case errors.Is(err, syscall.ECHILD):
			// Not our child: the helper's goroutine waiting for the
			// server can reap it while the helper exits, if the
			// signal came from the first of its threads to exit.
			if dead(pid) {
				return
			}
		case err != nil:
			t.Fatalf("wait4(%d): %v", pid, err)
		}
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL) // ours, by PID: don't leak it
			syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
			t.Fatalf("server pid %d outlived the test binary that started it", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// dead reports whether process pid has ended, reaped or not.
func dead(pid int) bool {
	if gone(pid) {
		return true
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	// The state follows the parenthesised command name.
	_, rest, _ := strings.Cut(string(stat), ") ")
	return strings.HasPrefix(rest, "Z")
}

func init() {
	if os.Getenv("REDISTEST_HELPER") == "1" {
		// Keep the main thread, which Go never lets exit, for the main
		// goroutine, so that helperStartAndExit's goroutine runs on a
		// thread that does exit.
		runtime.LockOSThread()
	}
}

func helperStartAndExit() {
	type result struct {
		s   *Server
		err error
	}
	done := make(chan result)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if syscall.Gettid() == syscall.Getpid() {
			done <- result{err: fmt.Errorf("on the main thread, which never exits")}
			return
		}
		s, err := startServer(nil, false, false)
		done <- result{s, err}
	}()
	res := <-done
	if res.err != nil {
		fmt.Println("helper:", res.err)
		os.Exit(1)
	}
	fmt.Printf("helper: pid %d dir %s\n", res.s.PID(), res.s.Dir())
	time.Sleep(200 * time.Millisecond) // time for the thread's exit to matter
	if _, err := res.s.Do("PING"); err != nil {
		fmt.Println("helper: the server died with the thread that asked for it:", err)
		os.Exit(1)
	}
	os.Exit(0) // no cleanup, as if the binary had crashed
}
