//go:build !linux

package compare

import (
	"errors"
	"time"
)

// ProcessCPU returns an error outside Linux: it reads /proc.
func ProcessCPU(pid int) (time.Duration, error) {
	return 0, errors.New("compare: ProcessCPU needs Linux's /proc")
}
