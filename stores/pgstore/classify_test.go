package pgstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/dbfaults"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/stores/pgstore"
	"github.com/sluicehq/sluice/stores/pgstore/pgtest"
)

// charge is a request every failure test sends.
func charge(key string) core.Request {
	return core.Request{Key: key, Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(100)}}
}

// wantStoreFailure fails t unless err is one package policy counts as the
// store's failure.
func wantStoreFailure(t *testing.T, what string, err error) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: no error", what)
	case !policy.IsStoreFailure(err):
		t.Errorf("%s: %v; policy.IsStoreFailure = false, want true", what, err)
	default:
		t.Logf("%s: %v (marked unavailable: %v)", what, err, errors.Is(err, core.ErrUnavailable))
	}
}

// poolWith returns a pool of srv's connections with the given settings,
// closed when the test ends.
func poolWith(t *testing.T, srv *pgtest.Server, settings map[string]string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range settings {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// TestFailures provokes each failure of the server that any call would
// get, and checks that package policy counts it as the store's, and that
// an invalid request is not.
func TestFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := pgtest.Start(t, pgtest.WithSetting("max_connections", "8"))
	admin := newPool(t, srv)
	admin.Config().MaxConns = 1
	store := newStore(t, admin, pgstore.Config{Table: "failures"})
	defer store.Close()

	_, err := store.Apply(ctx, core.Request{Key: "", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(1)}})
	if err == nil || policy.IsStoreFailure(err) {
		t.Errorf("an empty key: %v; want an error that is not the store's failure", err)
	}

	t.Run("read only", func(t *testing.T) {
		ro := newStore(t, poolWith(t, srv, map[string]string{"default_transaction_read_only": "on"}), pgstore.Config{Table: "failures"})
		defer ro.Close()
		_, err := ro.Apply(ctx, charge("read-only"))
		wantStoreFailure(t, "a charge in a read-only transaction", err)
		if !errors.Is(err, core.ErrUnavailable) {
			t.Errorf("not marked with core.ErrUnavailable: %v", err)
		}
	})

	t.Run("statement timeout", func(t *testing.T) {
		if _, err := store.Apply(ctx, charge("locked")); err != nil {
			t.Fatal(err)
		}
		// Another session holds the row, so the function waits for it
		// until the statement times out.
		tx, err := admin.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, "SELECT * FROM failures FOR UPDATE"); err != nil {
			t.Fatal(err)
		}
		slow := newStore(t, poolWith(t, srv, map[string]string{"statement_timeout": "100"}), pgstore.Config{Table: "failures"})
		defer slow.Close()
		_, err = slow.Apply(ctx, charge("locked"))
		wantStoreFailure(t, "a charge past statement_timeout", err)
		if !errors.Is(err, core.ErrUnavailable) {
			t.Errorf("not marked with core.ErrUnavailable: %v", err)
		}
	})

	t.Run("terminated", func(t *testing.T) {
		pool := poolWith(t, srv, map[string]string{"application_name": "terminated"})
		s := newStore(t, pool, pgstore.Config{Table: "failures"})
		defer s.Close()
		if _, err := s.Apply(ctx, charge("terminated")); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'terminated'"); err != nil {
			t.Fatal(err)
		}
		_, err := s.Apply(ctx, charge("terminated"))
		wantStoreFailure(t, "a charge on a terminated connection", err)
	})

	t.Run("too many connections", func(t *testing.T) {
		// Hold every connection the server allows a user who is not a
		// superuser (8 less 3 reserved), then ask for one more.
		var held []*pgx.Conn
		defer func() {
			for _, c := range held {
				c.Close(ctx)
			}
		}()
		for {
			c, err := pgx.Connect(ctx, srv.URL())
			if err != nil {
				break
			}
			held = append(held, c)
			if len(held) > 20 {
				t.Fatal("the server took more than 20 connections")
			}
		}
		pool := poolWith(t, srv, nil)
		s := newStore(t, pool, pgstore.Config{Table: "failures"})
		defer s.Close()
		_, err := s.Apply(ctx, charge("crowded"))
		wantStoreFailure(t, "a charge with every connection taken", err)
		if !errors.Is(err, core.ErrUnavailable) {
			t.Errorf("not marked with core.ErrUnavailable: %v", err)
		}
	})

	t.Run("killed", func(t *testing.T) {
		if err := srv.Kill(); err != nil {
			t.Fatal(err)
		}
		_, err := store.Apply(ctx, charge("killed"))
		wantStoreFailure(t, "a charge on a killed server's connection", err)
		_, err = store.Apply(ctx, charge("killed"))
		wantStoreFailure(t, "a charge with the server down", err)
	})
}

// TestBreakerModes kills the server under a breaker in each mode
// (dbfaults.BreakerModes): each mode answers, marked with its source, and
// the breaker opens.
func TestBreakerModes(t *testing.T) {
	t.Parallel()
	srv := pgtest.Start(t)
	pool := newPool(t, srv)
	dbfaults.BreakerModes(t, srv, func(t *testing.T, table string) core.Store {
		return newStore(t, pool, pgstore.Config{Table: table})
	})
}
