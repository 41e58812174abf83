package pgstore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores/pgstore"
	"github.com/sluicehq/sluice/stores/pgstore/pgtest"
)

// A limiter on PostgreSQL: the store creates its table and function on
// its first call, and decides on the server's clock.
func Example() {
	var t *testing.T // a test's; a program connects to its own server
	srv := pgtest.Start(t)

	ctx := context.Background()
	pool, err := pgxpool.New(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store, err := pgstore.New(pool, pgstore.Config{Table: "limits"})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := sluice.NewLimiter(store, algorithms.GCRA, core.PerSecond(10).WithBurst(3))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for range 4 {
		d, err := lim.Allow(ctx, "user:42")
		if err != nil {
			t.Fatal(err)
		}
		fmt.Println(d.Allowed, d.Remaining)
	}
}
