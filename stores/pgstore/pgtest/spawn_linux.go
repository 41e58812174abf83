//go:build linux

package pgtest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
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
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
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

// children returns the processes whose parent is pid, from /proc.
// PostgreSQL puts each backend in a process group of its own, so killing
// the postmaster's group does not reach them.
func children(pid int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []int
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(pid) {
			continue
		}
		if child, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
			out = append(out, child)
		}
	}
	return out
}
