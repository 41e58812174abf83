package mysqlstore_test

import (
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/leakcheck"
	"github.com/sluicehq/sluice/stores/mysqlstore"
	"github.com/sluicehq/sluice/stores/mysqlstore/mysqltest"
)

// Every test closes what it made: no goroutine of sluice may outlive
// them.
func TestMain(m *testing.M) { leakcheck.Main(m) }

// newDB returns a pool of connections to srv, closed when the test ends.
func newDB(t testing.TB, srv *mysqltest.Server) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(32)
	t.Cleanup(func() { db.Close() })
	return db
}

var tables atomic.Int64

// newStore returns a store on db with a table of its own.
func newStore(t testing.TB, db *sql.DB, cfg mysqlstore.Config) *mysqlstore.Store {
	t.Helper()
	if cfg.Table == "" {
		cfg.Table = fmt.Sprintf("sluice_test_%d", tables.Add(1))
	}
	s, err := mysqlstore.New(db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// store is newStore for storetest.Run.
func store(db *sql.DB) func(t *testing.T) core.Store {
	return func(t *testing.T) core.Store { return newStore(t, db, mysqlstore.Config{}) }
}
