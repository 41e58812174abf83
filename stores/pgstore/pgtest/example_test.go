package pgtest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/stores/pgstore/pgtest"
)

// A test starts a server of its own and connects to its URL; the server
// is stopped, by PID, when the test ends. A fault test may kill it and
// start it again on the same port, with its data.
func ExampleStart() {
	var t *testing.T // the test's *testing.T
	srv := pgtest.Start(t, pgtest.WithSetting("max_connections", "20"))
	pool, err := pgxpool.New(context.Background(), srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := pool.Ping(context.Background()); err == nil {
		t.Fatal("a killed server answered")
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
}
