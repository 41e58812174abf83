package pgstore_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/stores/pgstore"
)

// A limiter on PostgreSQL: the store creates its table and function on
// its first call, and decides on the server's clock.
func Example() {
	url := exampleURL() // your server's; here a server of the test binary's own

	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := pgstore.New(pool, pgstore.Config{Table: "limits"})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	lim, err := sluice.NewLimiter(store, algorithms.GCRA, sluice.PerMinute(3))
	if err != nil {
		log.Fatal(err)
	}
	for range 4 {
		d, err := lim.Allow(ctx, "user:42")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(d.Allowed, d.Remaining)
	}
	// Output:
	// true 2
	// true 1
	// true 0
	// false 0
}
