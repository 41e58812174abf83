package compare

import (
	"fmt"
	"os"
	"runtime/debug"
	"testing"

	"github.com/sluicehq/sluice/internal/leakcheck"
	"github.com/sluicehq/sluice/serve/internal/loadgen"
)

// TestMain removes the binaries the tests built and fails the run if a
// goroutine of the harness (such as the one waiting for a server)
// outlived the tests. The tests run with the load generator's garbage
// collector target (loadgen.GCPercent) unless GOGC is set.
func TestMain(m *testing.M) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(loadgen.GCPercent)
	}
	code := m.Run()
	if err := RemoveBuilds(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = max(code, 1)
	}
	if code == 0 {
		if err := leakcheck.Check(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}
