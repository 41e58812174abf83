package classifytest

import (
	"context"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
)

// RunCluster provokes the failures of a Redis Cluster of the test's own,
// in turn, and checks their classification: through a Cluster client
// (s.Cluster), a storm of redirections and a slot without a master; and
// through clients of one node (s.Single), as a client that is not a
// Cluster client sees a Cluster: MOVED for another node's key, CROSSSLOT
// for a batch over two slots, TRYAGAIN for a batch on a slot moving
// between nodes.
func RunCluster(t *testing.T, s Stores) {
	c := redistest.StartCluster(t)
	nodes := c.Servers()
	// Made before any slot changes, so that its slot map is the one the
	// cluster was created with.
	cluster := s.Cluster(t, c.Addrs())

	const key = "storm" // a user key, whose slot is moved about below
	owner := ownerOf(t, c, key)
	var target *redistest.Server // another master
	for _, n := range nodes {
		if n != owner {
			target = n
			break
		}
	}
	slot := strconv.Itoa(redistest.Slot("{" + key + "}"))
	bucket, gcra := Request(key), Request(key)
	gcra.Algorithm = algorithms.GCRA

	t.Run("MOVED", func(t *testing.T) {
		// A key of another node than the one the client knows.
		other := ""
		for i := 0; other == ""; i++ {
			if k := "moved" + strconv.Itoa(i); ownerOf(t, c, k) != nodes[0] {
				other = k
			}
		}
		store := s.Single(t, Dial{Addr: nodes[0].Addr()})
		check(t, s, "MOVED", true, "MOVED", []string{"MOVED"}, func(ctx context.Context) error {
			_, err := store.Apply(ctx, Request(other))
			return err
		})
	})
	t.Run("CROSSSLOT", func(t *testing.T) {
		// Two users' keys in different slots, decided together by a
		// client that does not know it talks to a Cluster.
		a, b := "a", "b"
		if redistest.Slot("{"+a+"}") == redistest.Slot("{"+b+"}") {
			t.Fatalf("%q and %q share a slot", a, b)
		}
		store := s.Single(t, Dial{Addr: nodes[0].Addr()})
		reqs := []core.Request{Request(a), Request(b)}
		check(t, s, "CROSSSLOT", false, "CROSSSLOT", []string{"CROSSSLOT"}, func(ctx context.Context) error {
			return store.ApplyAll(ctx, reqs, make([]core.Decision, len(reqs)))
		})
	})
	t.Run("TRYAGAIN", func(t *testing.T) {
		// The slot is moving to target, and a batch on the owner finds
		// one of its keys (the bucket's, charged here first) and not
		// the other.
		store := s.Single(t, Dial{Addr: owner.Addr()})
		if _, err := store.Apply(context.Background(), bucket); err != nil {
			t.Fatal(err)
		}
		id, err := do(t, target, "CLUSTER", "MYID").String()
		if err != nil {
			t.Fatal(err)
		}
		do(t, owner, "CLUSTER", "SETSLOT", slot, "MIGRATING", id)
		reqs := []core.Request{bucket, gcra}
		check(t, s, "TRYAGAIN", true, "TRYAGAIN", []string{"TRYAGAIN"}, func(ctx context.Context) error {
			return store.ApplyAll(ctx, reqs, make([]core.Decision, len(reqs)))
		})
	})
	t.Run("MOVED storm", func(t *testing.T) {
		// The slot is still migrating from owner to target, which does
		// not import it: for a missing key owner answers ASK target,
		// target answers MOVED owner, and so on, until the client gives
		// up (go-redis, after MaxRedirects) or the call's deadline
		// passes (rueidis).
		check(t, s, "MOVED storm", true, "", []string{"MOVED", "ASK"}, func(ctx context.Context) error {
			_, err := cluster.Apply(ctx, gcra)
			return err
		})
		do(t, owner, "CLUSTER", "SETSLOT", slot, "STABLE")
	})
	t.Run("CLUSTERDOWN", func(t *testing.T) {
		// The slot has no master any more. Last: the cluster is down
		// from then on.
		do(t, owner, "CLUSTER", "DELSLOTS", slot)
		check(t, s, "CLUSTERDOWN", true, "CLUSTERDOWN", []string{"CLUSTERDOWN"}, func(ctx context.Context) error {
			_, err := cluster.Apply(ctx, gcra)
			return err
		})
	})
}

// check makes a row's call until it fails saying says, and checks the
// error's classification (see [Check]).
func check(t *testing.T, s Stores, name string, failure bool, says string, types []string, call func(context.Context) error) {
	t.Helper()
	Check(t, failUntil(t, says, call), failure, s.types(name, types)...)
}

// ownerOf returns the node that serves user key's slot.
func ownerOf(t testing.TB, c *redistest.Cluster, key string) *redistest.Server {
	t.Helper()
	s, err := c.Owner("{" + key + "}")
	if err != nil {
		t.Fatal(err)
	}
	return s
}
