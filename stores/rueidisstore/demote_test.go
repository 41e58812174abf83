package rueidisstore_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/redisfaults"
	"github.com/sluicehq/sluice/redistest"
)

// TestDemotedPrimary is redisfaults.CheckDemotedPrimary: after a failover
// that repoints an address, rueidis would keep its connections to the
// demoted primary whatever they answer; the store makes it dial again
// (QUIT on READONLY), so that decisions come from the new primary within
// a second of the switch. Without the store's QUITs, READONLY went on
// until the test's end.
func TestDemotedPrimary(t *testing.T) {
	t.Parallel()
	primary, replica := redistest.Start(t), redistest.Start(t)
	redisfaults.Replicate(t, replica, primary)
	proxy := redistest.NewProxy(t, primary.Addr())
	redisfaults.CheckDemotedPrimary(t, newStore(t, newClient(t, proxy.Addr())), proxy, primary, replica)
}
