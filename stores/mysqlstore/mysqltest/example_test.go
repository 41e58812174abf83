package mysqltest_test

import (
	"context"
	"database/sql"
	"testing"

	_ "github.com/go-sql-driver/mysql"

	"github.com/sluicehq/sluice/stores/mysqlstore/mysqltest"
)

// A test starts a server of its own and connects to its DSN; the server
// is killed, by PID, when the test ends.
func ExampleStart() {
	var t *testing.T // the test's *testing.T
	srv := mysqltest.Start(t)
	db, err := sql.Open("mysql", srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.PingContext(context.Background()); err != nil {
		t.Fatal(err)
	}
}
