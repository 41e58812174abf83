package compare

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of /proc/PID/stat's CPU times: clock ticks of
// 1/100 s on every Linux architecture that sluice runs on.
const userHZ = 100

// ProcessCPU returns the CPU time, user plus system, that process pid and
// all its threads have used so far, in steps of 10 ms (/proc/PID/stat's
// utime and stime).
func ProcessCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("compare: cpu of pid %d: %w", pid, err)
	}
	// The command name, field 2, is in parentheses and may hold spaces;
	// the fields are counted from after its closing parenthesis, which
	// is field 3 (state). utime and stime are fields 14 and 15.
	s := string(data)
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return 0, fmt.Errorf("compare: cpu of pid %d: malformed /proc stat %q", pid, s)
	}
	fields := strings.Fields(s[end+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("compare: cpu of pid %d: /proc stat has %d fields after the name, want at least 13", pid, len(fields))
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("compare: cpu of pid %d: utime %q, stime %q", pid, fields[11], fields[12])
	}
	return time.Duration(utime+stime) * time.Second / userHZ, nil
}
