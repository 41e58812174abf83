package rueidisstore_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/rueidisstore"
	"github.com/sluicehq/sluice/stores/storetest"
)

var prefixes atomic.Int64

// newClient returns a client of addrs (one server, or a Cluster's nodes),
// closed when the test ends.
func newClient(t testing.TB, addrs ...string) rueidis.Client {
	t.Helper()
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	return client
}

// newStore returns a store on client with a prefix of its own, so that
// stores sharing a server never share a key.
func newStore(t testing.TB, client rueidis.Client) *rueidisstore.Store {
	t.Helper()
	store, err := rueidisstore.New(client, rueidisstore.Config{Prefix: fmt.Sprintf("t%d:", prefixes.Add(1))})
	if err != nil {
		t.Fatal(err)
	}
	return store
}

func TestConformance(t *testing.T) {
	client := newClient(t, testAddr(t))
	storetest.Run(t, func(t *testing.T) core.Store { return newStore(t, client) })
}

func TestConformanceCluster(t *testing.T) {
	client := newClient(t, redistest.SharedCluster(t).Addrs()...)
	// Keys in different slots are decided in turn (see Store.ApplyAll).
	storetest.Run(t, func(t *testing.T) core.Store { return newStore(t, client) }, storetest.InTurn())
}
