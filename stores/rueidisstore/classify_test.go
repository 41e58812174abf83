package rueidisstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/classifytest"
)

// TestClassifyClosedClient closes the client under the store: every call
// then fails alike, as the store's failure.
func TestClassifyClosedClient(t *testing.T) {
	t.Parallel()
	client := newClient(t, testAddr(t))
	store := newStore(t, client)
	client.Close()
	_, err := store.Apply(context.Background(), classifytest.Request("k"))
	classifytest.Check(t, err, true, "unavailable")
	if !errors.Is(err, rueidis.ErrClosing) {
		t.Errorf("the error %v is not the closed client's", err)
	}
}
