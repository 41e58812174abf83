package compare

import (
	"fmt"
	"os"
	"testing"

	"github.com/sluicehq/sluice/internal/leakcheck"
)

// TestMain removes the binaries the tests built and fails the run if a
// goroutine of the harness (such as the one waiting for a server)
// outlived the tests.
func TestMain(m *testing.M) {
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
