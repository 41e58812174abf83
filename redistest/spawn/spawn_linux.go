package spawn

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

// spawner is the goroutine that starts every child process. The kernel
// sends a child its parent-death signal when the thread that forked it
// exits, not when the process does (prctl(2), https://go.dev/issue/27505),
// and Go terminates a thread whose locked goroutine returns. So children
// are forked from one goroutine that locks its thread and never returns:
// the thread, and so every child's Pdeathsig, lasts exactly as long as the
// test binary.
var spawner struct {
	once sync.Once
	reqs chan func()
}

// start starts cmd on the spawner's thread, with SIGKILL as its
// parent-death signal.
func start(cmd *exec.Cmd) error {
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

// Children returns the processes whose parent is pid, from /proc: for a
// server, such as PostgreSQL, that puts each of its children in a process
// group of its own, so that killing its group does not reach them.
// Outside Linux it returns nil.
func Children(pid int) []int {
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

// ephemeralLow returns the first port of the kernel's ephemeral range, or
// 0 if it cannot tell.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	low, _ := strconv.Atoi(f[0])
	return low
}
