package mysqlstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/dbfaults"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/stores/mysqlstore"
	"github.com/sluicehq/sluice/stores/mysqlstore/mysqltest"
	"github.com/sluicehq/sluice/stores/storetest"
)

// TestConformance runs the conformance suite on the store, every subtest
// on a table of its own in one server.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, store(newDB(t, mysqltest.Start(t))))
}

// TestConformanceThroughChain runs the conformance suite on the
// production chain over the store (dbfaults.ConformanceThroughChain).
func TestConformanceThroughChain(t *testing.T) {
	t.Parallel()
	dbfaults.ConformanceThroughChain(t, store(newDB(t, mysqltest.Start(t))))
}

// TestNoOvergrantProcesses runs four processes of 16 goroutines on one
// key of one table (dbfaults.NoOvergrantProcesses): together they are
// admitted no more than the bound, and every decision replays against the
// Go model. The test is not parallel, so that the package's other tests
// do not compete with the workers for the machine's cores.
func TestNoOvergrantProcesses(t *testing.T) {
	dbfaults.NoOvergrantProcesses(t,
		func(t *testing.T) string { return mysqltest.Start(t).DSN() },
		func(t testing.TB, dsn, table string) core.Store {
			return newStore(t, openDB(t, dsn), mysqlstore.Config{Table: table})
		})
}

// TestKilled kills the server: a call on a connection it held, and a
// call while it is down, fail with errors package policy counts as the
// store's failure; an invalid request is not one.
func TestKilled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := mysqltest.Start(t)
	s := newStore(t, newDB(t, srv), mysqlstore.Config{})
	defer s.Close()
	req := core.Request{Key: "k", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(100)}}
	if _, err := s.Apply(ctx, req); err != nil {
		t.Fatal(err)
	}
	bad := req
	bad.Key = ""
	if _, err := s.Apply(ctx, bad); err == nil || policy.IsStoreFailure(err) {
		t.Errorf("an empty key: %v; want an error that is not the store's failure", err)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		_, err := s.Apply(ctx, req)
		if err == nil || !policy.IsStoreFailure(err) {
			t.Errorf("charge %d with the server killed: %v; want the store's failure", i, err)
		}
		t.Logf("charge %d with the server killed: %v (marked unavailable: %v)", i, err, errors.Is(err, core.ErrUnavailable))
	}
}

// TestBreakerModes kills the server under a breaker in each mode
// (dbfaults.BreakerModes): each mode answers, marked with its source, and
// the breaker opens.
func TestBreakerModes(t *testing.T) {
	t.Parallel()
	srv := mysqltest.Start(t)
	db := newDB(t, srv)
	dbfaults.BreakerModes(t, srv, func(t *testing.T, table string) core.Store {
		return newStore(t, db, mysqlstore.Config{Table: table})
	})
}

// TestKillRestart is R-04 on MariaDB (dbfaults.KillRestart): under load
// behind a breaker in each mode, the server is killed (kill -9) and
// restarted 2 s later. InnoDB keeps the keys' states across the crash.
func TestKillRestart(t *testing.T) {
	t.Parallel()
	for _, mode := range dbfaults.Modes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			srv := mysqltest.Start(t)
			dbfaults.KillRestart(t, srv, newStore(t, newDB(t, srv), mysqlstore.Config{Table: "recovery"}), mode)
		})
	}
}
