package rueidisstore_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/redisfaults"
	"github.com/sluicehq/sluice/redistest"
)

// TestBoundedCleanup, through rueidis: on a Redis whose clients are all paused
// (CLIENT PAUSE ALL), callers of Wait, Reserve and Cancel, Acquire,
// Release and a stack's Wait give up; each call returns within its
// context's end plus core.CleanupTimeout, and reports the refund or
// release it could not confirm (core.ErrCleanup) with the reason the
// caller gave up.
func TestBoundedCleanup(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr())
	store := newStore(t, client)
	redisfaults.CheckBoundedCleanup(t, store, func() {
		if _, err := srv.Do("CLIENT", "PAUSE", "2000", "ALL"); err != nil {
			t.Fatal(err)
		}
	})
}
