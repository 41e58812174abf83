package pgstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/leakcheck"
	"github.com/sluicehq/sluice/stores/pgstore"
	"github.com/sluicehq/sluice/stores/pgstore/pgtest"
)

// Every test closes what it made: no goroutine of sluice, gobreaker or
// pgx may outlive them.
func TestMain(m *testing.M) { leakcheck.Main(m) }

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
