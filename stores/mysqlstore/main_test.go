package mysqlstore_test

import (
	"database/sql"
	"fmt"
	"log"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/dbfaults"
	"github.com/sluicehq/sluice/stores/mysqlstore"
	"github.com/sluicehq/sluice/stores/mysqlstore/mysqltest"
)

// Every test closes what it made: no goroutine of sluice may outlive
// them. TestMain stops the Examples' server and checks (dbfaults.Main).
func TestMain(m *testing.M) {
	dbfaults.Main(m, func() error {
		if examples.srv == nil {
			return nil
		}
		return examples.srv.Close()
	})
}

// examples is the Examples' server, started by the first of them.
var examples struct {
	once sync.Once
	srv  *mysqltest.Server
}

// exampleDSN returns the DSN of the Examples' server, started on first
// use, without the table "limits" an Example may have made before (as
// with -count=2).
func exampleDSN() string {
	examples.once.Do(func() {
		srv, err := mysqltest.New()
		if err != nil {
			log.Fatal(err)
		}
		examples.srv = srv
	})
	db, err := sql.Open("mysql", examples.srv.DSN())
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("DROP TABLE IF EXISTS limits"); err != nil {
		log.Fatal(err)
	}
	return examples.srv.DSN()
}

// newDB returns a pool of connections to srv, closed when the test ends.
func newDB(t testing.TB, srv *mysqltest.Server) *sql.DB {
	t.Helper()
	return openDB(t, srv.DSN())
}

// openDB returns a pool of connections to the server dsn names, closed
// when the test ends.
func openDB(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
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
