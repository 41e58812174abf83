package mysqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	_ "github.com/go-sql-driver/mysql"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/stores/mysqlstore"
)

// A limiter on MariaDB: the store creates its table on its first call,
// and decides on the server's clock.
func Example() {
	dsn := exampleDSN() // your server's; here a server of the test binary's own

	db, err := sql.Open("mysql", dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := mysqlstore.New(db, mysqlstore.Config{Table: "limits"})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	lim, err := sluice.NewLimiter(store, algorithms.GCRA, sluice.PerMinute(3))
	if err != nil {
		log.Fatal(err)
	}
	for range 4 {
		d, err := lim.Allow(context.Background(), "user:42")
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
