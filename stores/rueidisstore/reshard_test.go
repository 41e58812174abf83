package rueidisstore_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redisfaults"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/rueidisstore"
)

// TestReshardUnderLoad moves the slot of a hot key's stack to another
// master with redis-cli --cluster reshard, 16 slots at once, one key per
// MIGRATE, while 64 goroutines decide on it. The slot holds 1,000
// other keys, so that it stays half-moved for as many MIGRATE calls, and
// the stack's two states are split between the nodes between two of
// them. The client follows MOVED and ASK and the store retries TRYAGAIN,
// so that through the store alone no decision fails but with TRYAGAIN,
// and at most 0.1 % with it, when the machine holds a MIGRATE past the
// retries' 7 ms (0 in 6 runs; without the retry, rueidisstore's failed
// with TRYAGAIN, 64 in a run: 0.16 %);
// behind a fail-open breaker no error reaches a caller (the breaker's
// answers, to calls the loaded test machine holds past the deadline,
// are logged: 0 to 0.3 % on a quiet machine, all of them when a loaded
// one opens the circuit); and the limit is never exceeded. After the
// move every key of the slot is on the new master.
// Each case has a Cluster of its own, and they run one after the other:
// two loads of 64 goroutines on the test machine's two cores, under the
// race detector, would hold calls past any deadline. The breaker's is
// 50 ms for the same reason: what the test checks is the move, not the
// machine's latency.
func TestReshardUnderLoad(t *testing.T) {
	t.Parallel()
	t.Run("store", func(t *testing.T) {
		c := redistest.StartCluster(t)
		s := reshardStore(t, c)
		r := redisfaults.ReshardUnderLoad(t, c, s, s)
		t.Log(r)
		redisfaults.CheckReshard(t, r, 0.001, false)
	})
	t.Run("breaker", func(t *testing.T) {
		c := redistest.StartCluster(t)
		s := reshardStore(t, c)
		b, err := policy.NewBreaker(s, policy.WithMode(policy.FailOpen), policy.WithTimeout(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		r := redisfaults.ReshardUnderLoad(t, c, b, s)
		t.Log(r)
		redisfaults.CheckReshard(t, r, 1, true)
	})
}

func reshardStore(t *testing.T, c *redistest.Cluster) *rueidisstore.Store {
	store, err := rueidisstore.New(newClient(t, c.Addrs()...), rueidisstore.Config{Prefix: "reshard:"})
	if err != nil {
		t.Fatal(err)
	}
	return store
}
