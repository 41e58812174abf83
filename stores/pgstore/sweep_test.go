package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores/casstore"
	"github.com/sluicehq/sluice/stores/pgstore"
	"github.com/sluicehq/sluice/stores/pgstore/pgtest"
)

// TestSweep charges 1000 keys under a limit that forgets them within a
// millisecond and one under a limit of an hour, then sweeps until the
// short ones are gone: the long one stays, and the swept keys decide as
// fresh keys. It asserts an order, not a duration: the sweeps go on
// until the server's clock has passed the short keys' expiry.
func TestSweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t, pgtest.Start(t))
	s := newStore(t, pool, pgstore.Config{Table: "swept", Config: casstore.Config{SweepInterval: -1}})
	defer s.Close()
	short := core.PerSecond(1000).WithBurst(1)
	const keys = 1000
	for i := range keys {
		d, err := s.Apply(ctx, core.Request{Key: fmt.Sprint("short:", i), Cost: 1, Terms: &core.Terms{Algorithm: algorithms.GCRA, Limit: short}})
		if err != nil || !d.Allowed {
			t.Fatalf("charge of key %d: %+v, %v", i, d, err)
		}
	}
	long := core.Request{Key: "long", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerHour(2)}}
	if d, err := s.Apply(ctx, long); err != nil || !d.Allowed {
		t.Fatalf("charge of the long key: %+v, %v", d, err)
	}
	rows := func() int {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM swept").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := rows(); n != keys+1 {
		t.Fatalf("%d rows after charging %d keys", n, keys+1)
	}
	var swept int64
	for deadline := time.Now().Add(time.Minute); rows() > 1; {
		n, err := s.Sweep(ctx)
		if err != nil {
			t.Fatal(err)
		}
		swept += n
		if time.Now().After(deadline) {
			t.Fatalf("%d rows left after a minute of sweeps", rows())
		}
		time.Sleep(time.Millisecond)
	}
	if swept != keys {
		t.Errorf("swept %d rows, want %d", swept, keys)
	}
	// The long key holds its charge; a swept key is fresh.
	long.Op = core.OpPeek
	if d, err := s.Apply(ctx, long); err != nil || d.Remaining != 0 {
		t.Errorf("peek at the long key after the sweep = %+v, %v; want its one token left spent", d, err)
	}
	if d, err := s.Apply(ctx, core.Request{Key: "short:7", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.GCRA, Limit: short}}); err != nil || !d.Allowed {
		t.Errorf("a swept key = %+v, %v; want allowed, as a fresh key", d, err)
	}
}

// TestSweeper checks that the store's own sweeper deletes idle rows, and
// that Close stops it.
func TestSweeper(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t, pgtest.Start(t))
	s := newStore(t, pool, pgstore.Config{Table: "sweeper", Config: casstore.Config{SweepInterval: time.Millisecond}})
	for i := range 10 {
		if _, err := s.Apply(ctx, core.Request{Key: fmt.Sprint(i), Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(1000).WithBurst(1)}}); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM sweeper").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d rows left after a minute of the sweeper", n)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}
