package cputime

import (
	"syscall"
	"time"
)

// Process returns the CPU time the process has used so far, in user and
// system mode together, on every thread.
func Process() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
