package pgstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/dbfaults"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/pgstore"
	"github.com/sluicehq/sluice/stores/pgstore/pgtest"
)

// TestBrokenMidCall breaks the connection of a call while the server
// runs it (the call's function waits for a row another session has
// locked): the backend terminated, then a proxy between client and
// server closed. Each call fails with an error package policy counts as
// the store's failure, the store decides on afterwards, and its next
// decision is exact whether or not the server applied the broken call:
// the store finds out, as a mismatch.
func TestBrokenMidCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := pgtest.Start(t)
	admin := newPool(t, srv)
	limit := core.PerHour(10)
	req := core.Request{Key: "k", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: limit}}

	// waiting reports whether a session of application app waits for a
	// lock.
	waiting := func(app string) func() bool {
		return func() bool {
			var n int
			err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'", app).Scan(&n)
			if err != nil {
				t.Fatal(err)
			}
			return n > 0
		}
	}
	// brokenCall charges req through s while the row is locked, breaks
	// the call with cut once the server runs it, and checks the error.
	brokenCall := func(t *testing.T, table, app string, s *pgstore.Store, cut func()) {
		tx, err := admin.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, "SELECT * FROM "+table+" FOR UPDATE"); err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() {
			_, err := s.Apply(ctx, req)
			errc <- err
		}()
		dbfaults.WaitFor(t, "the call to wait for the row", waiting(app))
		cut()
		err = <-errc
		wantStoreFailure(t, "a call broken mid-call", err)
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// exact checks that s's next charge, and a peek of a store that knows
	// nothing of the key, both see every charge the server applied.
	exact := func(t *testing.T, table string, s *pgstore.Store) {
		d, err := s.Apply(ctx, req)
		if err != nil || !d.Allowed {
			t.Fatalf("a charge after the broken call = %+v, %v", d, err)
		}
		fresh := newStore(t, admin, pgstore.Config{Table: table})
		defer fresh.Close()
		peek := req
		peek.Op = core.OpPeek
		p, err := fresh.Apply(ctx, peek)
		if err != nil {
			t.Fatal(err)
		}
		// The peek asks for one more token: it reports what is left
		// after it.
		if d.Remaining != p.Remaining+1 {
			t.Errorf("after the broken call, the store's charge left %d, another store sees %d: the store decided on a stale state", d.Remaining, p.Remaining+1)
		}
		t.Logf("the charge after the broken call left %d of 10 (the broken call applied: %v)", d.Remaining, d.Remaining == 7)
	}

	t.Run("terminated", func(t *testing.T) {
		const table, app = "midcall_terminated", "midcall-terminated"
		pool := poolWith(t, srv, map[string]string{"application_name": app})
		s := newStore(t, pool, pgstore.Config{Table: table})
		defer s.Close()
		if _, err := s.Apply(ctx, req); err != nil { // the row to lock
			t.Fatal(err)
		}
		brokenCall(t, table, app, s, func() {
			if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", app); err != nil {
				t.Fatal(err)
			}
		})
		exact(t, table, s) // on the same pool, which replaced the connection
	})

	t.Run("proxy", func(t *testing.T) {
		const table, app = "midcall_proxy", "midcall-proxy"
		proxy := redistest.NewProxy(t, fmt.Sprint("127.0.0.1:", srv.Port()))
		cfg, err := pgxpool.ParseConfig(strings.Replace(srv.URL(), fmt.Sprint(":", srv.Port()), ":"+strings.Split(proxy.Addr(), ":")[1], 1))
		if err != nil {
			t.Fatal(err)
		}
		cfg.ConnConfig.RuntimeParams["application_name"] = app
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		s := newStore(t, pool, pgstore.Config{Table: table})
		defer s.Close()
		if _, err := s.Apply(ctx, req); err != nil {
			t.Fatal(err)
		}
		brokenCall(t, table, app, s, proxy.Close)
		// The proxy is gone: the store's next call fails too, then the
		// store on a direct pool decides exactly.
		if _, err := s.Apply(ctx, req); err == nil {
			t.Error("a call through the closed proxy: no error")
		}
		direct := newStore(t, admin, pgstore.Config{Table: table})
		defer direct.Close()
		exact(t, table, direct)
	})
}

// TestKillRestart is R-04 on PostgreSQL (dbfaults.KillRestart): under
// load behind a breaker in each mode, the server is killed (kill -9,
// backends included) and restarted 2 s later. The table is UNLOGGED, so
// the crash empties it: every key starts afresh.
func TestKillRestart(t *testing.T) {
	t.Parallel()
	for _, mode := range dbfaults.Modes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			srv := pgtest.Start(t)
			dbfaults.KillRestart(t, srv, newStore(t, newPool(t, srv), pgstore.Config{Table: "recovery"}), mode)
		})
	}
}
