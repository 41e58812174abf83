package rueidisstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/classifytest"
)

// classifyStores are the stores classifytest's rows run through: each on
// a rueidis client of its own.
func classifyStores() classifytest.Stores {
	return classifytest.Stores{
		Single: func(t testing.TB, d classifytest.Dial) core.Store {
			// ForceSingleClient: NewClient returns the client even when
			// the server refuses it (a wrong password, a TLS handshake),
			// with the error, and the row's calls then meet the failure.
			client, err := rueidis.NewClient(rueidis.ClientOption{
				InitAddress: []string{d.Addr}, Username: d.Username, Password: d.Password, TLSConfig: d.TLS,
				DisableCache: true, DisableRetry: true, ForceSingleClient: true,
			})
			if client == nil {
				t.Fatal(err)
			}
			t.Cleanup(client.Close)
			return storeOn(t, client)
		},
		Cluster: func(t testing.TB, addrs []string) core.Store {
			return storeOn(t, newClient(t, addrs...))
		},
		// rueidis follows the storm's redirections until the call's
		// deadline.
		Types: map[string]string{"MOVED storm": "timeout"},
	}
}

// storeOn returns a store with a prefix of its own on client, closed
// when the test ends.
func storeOn(t testing.TB, client rueidis.Client) core.Store {
	t.Helper()
	store := newStore(t, client)
	t.Cleanup(func() { store.Close() })
	return store
}

// TestClassify provokes each failure of a single server (docs/outages.md,
// "How failures are classified") through rueidis and checks how the
// store's error is classified.
func TestClassify(t *testing.T) {
	t.Parallel()
	classifytest.Run(t, classifyStores())
}

// TestClassifyCluster provokes each failure of a Redis Cluster through
// rueidis and checks how the store's error is classified.
func TestClassifyCluster(t *testing.T) {
	t.Parallel()
	classifytest.RunCluster(t, classifyStores())
}

// TestClassifyClosedClient closes the client under the store: every call
// then fails alike, as the store's failure.
func TestClassifyClosedClient(t *testing.T) {
	t.Parallel()
	client := newClient(t, testAddr(t))
	store := storeOn(t, client)
	client.Close()
	_, err := store.Apply(context.Background(), classifytest.Request("k"))
	classifytest.Check(t, err, true, "unavailable")
	if !errors.Is(err, rueidis.ErrClosing) {
		t.Errorf("the error %v is not the closed client's", err)
	}
}
