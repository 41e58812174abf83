package rueidisstore_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redisfaults"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/rueidisstore"
)

// TestReshardUnderLoad moves the slot of a hot key's stack to another
// master, key by key as redis-cli --cluster reshard does, while 64
// goroutines decide on it: the client follows MOVED and ASK and
// the store retries TRYAGAIN, so that at most 0.1 % of the decisions fail
// (none with CROSSSLOT); behind a fail-open breaker no error reaches a
// caller (the breaker's answers, to the odd TRYAGAIN and to calls the
// loaded test machine holds past the deadline, are logged: 0 to 0.33 %
// on a quiet machine, all of them when a loaded one opens the circuit);
// and the limit is never exceeded.
// Each case has a Cluster of its own, and they run one after the other:
// two loads of 64 goroutines on the test machine's two cores, under the
// race detector, would hold calls past any deadline. The breaker's is
// 50 ms for the same reason: what the test checks is the move, not the
// machine's latency.
func TestReshardUnderLoad(t *testing.T) {
	t.Parallel()
	t.Run("store", func(t *testing.T) {
		c := redistest.StartCluster(t)
		r := redisfaults.ReshardUnderLoad(t, c, reshardStore(t, c), "reshard:", 2*time.Millisecond)
		t.Log(r)
		redisfaults.CheckReshard(t, r, 0.001, false)
	})
	t.Run("breaker", func(t *testing.T) {
		c := redistest.StartCluster(t)
		b, err := policy.NewBreaker(reshardStore(t, c), policy.WithMode(policy.FailOpen), policy.WithTimeout(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		r := redisfaults.ReshardUnderLoad(t, c, b, "reshard:", 0)
		t.Log(r)
		redisfaults.CheckReshard(t, r, 1, true)
	})
}

func reshardStore(t *testing.T, c *redistest.Cluster) core.Store {
	store, err := rueidisstore.New(newClient(t, c.Addrs()...), rueidisstore.Config{Prefix: "reshard:"})
	if err != nil {
		t.Fatal(err)
	}
	return store
}
