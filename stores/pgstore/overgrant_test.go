package pgstore_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/dbfaults"
	"github.com/sluicehq/sluice/stores/pgstore"
	"github.com/sluicehq/sluice/stores/pgstore/pgtest"
)

// TestNoOvergrantProcesses runs four processes of 16 goroutines on one
// key of one table (dbfaults.NoOvergrantProcesses): together they are
// admitted no more than the bound, and every decision replays against the
// Go model. The test is not parallel, so that the package's other tests
// do not compete with the workers for the machine's cores.
func TestNoOvergrantProcesses(t *testing.T) {
	dbfaults.NoOvergrantProcesses(t,
		func(t *testing.T) string { return pgtest.Start(t).URL() },
		func(t testing.TB, url, table string) core.Store {
			pool, err := pgxpool.New(context.Background(), url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			return newStore(t, pool, pgstore.Config{Table: table})
		})
}
