package mysqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	_ "github.com/go-sql-driver/mysql"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores/mysqlstore"
	"github.com/sluicehq/sluice/stores/mysqlstore/mysqltest"
)

// A limiter on MariaDB: the store creates its table on its first call,
// and decides on the server's clock.
func Example() {
	var t *testing.T // a test's; a program connects to its own server
	srv := mysqltest.Start(t)

	db, err := sql.Open("mysql", srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	store, err := mysqlstore.New(db, mysqlstore.Config{Table: "limits"})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	lim, err := sluice.NewLimiter(store, algorithms.GCRA, core.PerSecond(10).WithBurst(3))
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		d, err := lim.Allow(context.Background(), "user:42")
		if err != nil {
			t.Fatal(err)
		}
		fmt.Println(d.Allowed, d.Remaining)
	}
}
