package rueidisstore_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/redisfaults"
	"github.com/sluicehq/sluice/redistest"
)

// TestEviction floods a small server with 100,000 keys while a hot key is
// decided under load, under allkeys-lru and volatile-ttl: the hot
// key admits at most one extra burst each time its state is lost, and
// under allkeys-lru, used all the time, it is never evicted while the
// flood leaves the other keys a few seconds (redisfaults.Evictions). The
// server is the test's own, as its memory and policy are.
func TestEviction(t *testing.T) {
	t.Parallel()
	for _, e := range redisfaults.Evictions() {
		t.Run(e.Name, func(t *testing.T) {
			srv := redistest.Start(t)
			t.Log(redisfaults.EvictUnderLoad(t, srv, newStore(t, newClient(t, srv.Addr())), e))
		})
	}
}

// TestKeyFlood sends 100,000 distinct keys under a one-second fixed
// window to a server of the test's own: each key has a TTL, Redis
// is back to 1% of the peak within the window and 2 s, and a 1 MiB key
// is rejected (redisfaults.CheckKeyFlood).
func TestKeyFlood(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	store := newStore(t, newClient(t, srv.Addr()))
	redisfaults.CheckKeyFlood(t, srv, store, store)
}
