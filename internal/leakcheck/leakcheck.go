package leakcheck

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// markers name the code whose goroutines must be gone once every test
// has ended: sluice's packages (their tests included), gobreaker, and
// the Redis, PostgreSQL and MySQL clients, whose goroutines a closed
// client stops.
var markers = []string{
	"github.com/sluicehq/sluice/",
	"github.com/sony/gobreaker",
	"github.com/redis/go-redis",
	"github.com/redis/rueidis",
	"github.com/jackc/pgx",
	"github.com/jackc/puddle",
	"github.com/go-sql-driver/mysql",
	"database/sql.",
}

// ignored are frames of goroutines that are not the code's own: this
// package's, the test runner's, and the test kits' process spawner
// (redistest/spawn's, for redistest, pgtest and mysqltest), which lives as
// long as the test binary by design. A child's reaper, spawn.Start's,
// is not ignored: it ends when its server is killed.
var ignored = []string{
	"github.com/sluicehq/sluice/internal/leakcheck.",
	"github.com/sluicehq/sluice/redistest/spawn.start",
	"testing.(*M).",
	"testing.tRunner",
	"testing.runTests",
}

// wait is how long Check waits for goroutines to end after the tests:
// a Close may hand a goroutine its last step.
const wait = 5 * time.Second

// Main runs m's tests, then [Check]s that no goroutine outlived them, and
// exits: with 1 if the tests passed but goroutines leaked. Call it as the
// whole of TestMain, or run [Check] after m.Run in a TestMain of your own
// (redistest.Main does).
func Main(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := Check(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// Check waits up to five seconds for the goroutines whose stacks mention
// sluice, gobreaker or a Redis client to end, and returns an error
// listing those that did not.
func Check() error {
	deadline := time.Now().Add(wait)
	for {
		left := live()
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("leakcheck: %d goroutines outlived the tests:\n\n%s", len(left), strings.Join(left, "\n\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// live returns the stacks of the goroutines that mention a marker and no
// ignored frame.
func live() []string {
	var out []string
	for _, g := range stacks() {
		if mentions(g, markers) && !mentions(g, ignored) {
			out = append(out, g)
		}
	}
	return out
}

func mentions(stack string, names []string) bool {
	for _, n := range names {
		if strings.Contains(stack, n) {
			return true
		}
	}
	return false
}

// stacks returns every goroutine's stack but the caller's.
func stacks() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	all := strings.Split(string(buf), "\n\n")
	return all[1:] // the first is this goroutine's
}
