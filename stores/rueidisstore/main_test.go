package rueidisstore_test

import (
	"testing"

	"github.com/sluicehq/sluice/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// testAddr returns the address of the test binary's own Redis server.
func testAddr(t testing.TB) string { return redistest.Shared(t).Addr() }
