//go:build unix

package policy

import "syscall"

// processCPU returns the CPU time the process has used, ns, on every
// thread; -1 if it cannot tell.
func processCPU() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return -1
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
