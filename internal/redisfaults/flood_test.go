package redisfaults

import (
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// TestReclaim checks the SCAN CheckKeyFlood falls back on: with Redis's
// active expiry off, keys past their TTL stay counted in DBSIZE until
// reclaim meets them, and a key not yet expired stays.
func TestReclaim(t *testing.T) {
	srv := redistest.Start(t, redistest.WithArgs("--enable-debug-command", "local"))
	do := func(args ...string) redistest.Reply {
		t.Helper()
		r, err := srv.Do(args...)
		if err == nil {
			err = r.Err()
		}
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return r
	}
	do("DEBUG", "SET-ACTIVE-EXPIRE", "0")
	const expiring = 5000
	for i := range expiring {
		do("SET", "gone:"+strconv.Itoa(i), "x", "PX", "50")
	}
	do("SET", "kept", "x", "PX", "600000")
	time.Sleep(100 * time.Millisecond) // every gone: key is past its TTL
	if n, _ := do("DBSIZE").Int(); n != expiring+1 {
		t.Fatalf("DBSIZE %d before the SCAN, want %d: active expiry was not off", n, expiring+1)
	}
	reclaim(t, srv)
	if n, _ := do("DBSIZE").Int(); n != 1 {
		t.Fatalf("DBSIZE %d after the SCAN, want 1 (the key not yet expired)", n)
	}
}
