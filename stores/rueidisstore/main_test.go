package rueidisstore_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/leakcheck"
	"github.com/sluicehq/sluice/redistest"
)

// Every test closes what it made: no goroutine of sluice, gobreaker or a
// Redis client may outlive them.
func TestMain(m *testing.M) { redistest.Main(m, leakcheck.Check) }

// testAddr returns the address of the test binary's own Redis server.
func testAddr(t testing.TB) string { return redistest.Shared(t).Addr() }
