//go:build !unix

package policy

// processCPU returns -1: the process's CPU time is not read here, and no
// stall counts as a freeze.
func processCPU() int64 { return -1 }
