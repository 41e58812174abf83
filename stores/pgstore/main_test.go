package pgstore_test

import (
	"context"
	"fmt"
	"log"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/dbfaults"
	"github.com/sluicehq/sluice/stores/pgstore"
	"github.com/sluicehq/sluice/stores/pgstore/pgtest"
)

// Every test closes what it made: no goroutine of sluice, gobreaker or
// pgx may outlive them. TestMain stops the Examples' server.
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
	srv  *pgtest.Server
}

// exampleURL returns the URL of the Examples' server, started on first
// use, without the table "limits" an Example may have made before (as
// with -count=2).
func exampleURL() string {
	examples.once.Do(func() {
		srv, err := pgtest.New()
		if err != nil {
			log.Fatal(err)
		}
		examples.srv = srv
	})
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, examples.srv.URL())
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "DROP TABLE IF EXISTS limits"); err != nil {
		log.Fatal(err)
	}
	return examples.srv.URL()
}

// newPool returns a pool of connections to srv, closed when the test
// ends.
func newPool(t testing.TB, srv *pgtest.Server) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

var tables atomic.Int64

// newStore returns a store on pool with a table of its own, which tests
// sharing a server never share.
func newStore(t testing.TB, pool *pgxpool.Pool, cfg pgstore.Config) *pgstore.Store {
	t.Helper()
	if cfg.Table == "" {
		cfg.Table = fmt.Sprintf("sluice_test_%d", tables.Add(1))
	}
	s, err := pgstore.New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// store is newStore for storetest.Run.
func store(pool *pgxpool.Pool) func(t *testing.T) core.Store {
	return func(t *testing.T) core.Store { return newStore(t, pool, pgstore.Config{}) }
}
