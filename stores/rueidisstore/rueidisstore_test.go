package rueidisstore_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/stores/rueidisstore"
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
