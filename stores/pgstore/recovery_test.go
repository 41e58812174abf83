package pgstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/memstore"
	"github.com/sluicehq/sluice/stores/pgstore"
	"github.com/sluicehq/sluice/stores/pgstore/pgtest"
)

// waitFor polls cond every few milliseconds until it holds, failing t
// after a minute: it waits for an order of events, not for a duration.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
	}
}

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
	req := core.Request{Key: "k", Algorithm: algorithms.TokenBucket, Limit: limit, Cost: 1}

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
		waitFor(t, "the call to wait for the row", waiting(app))
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

// record is one decision of the recovery test's load.
type record struct {
	start, end time.Time
	key        int
	allowed    bool
	source     core.Source
	err        error
}

// TestKillRestart is R-04 on PostgreSQL: under load behind a breaker in
// each mode, the server is killed (kill -9, backends included), the
// circuit opens and answers by its mode, the server is restarted on the
// same port 2 s after the kill, and the circuit closes. Asserted, as orders and bounds that
// a stalled process cannot break: no caller gets an error; no decision
// begun after the kill and ended before the restart claims the store;
// the store decides again after the restart; and in the 5 s after it no
// key is admitted by the store more than its limit allows (the table is
// UNLOGGED, so the crash emptied it: every key starts afresh).
func TestKillRestart(t *testing.T) {
	t.Parallel()
	for _, mode := range []policy.Mode{policy.FailOpen, policy.FailClosed, policy.Degrade} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			testKillRestart(t, mode)
		})
	}
}

func testKillRestart(t *testing.T, mode policy.Mode) {
	const (
		keys       = 4
		goroutines = 4
		rate       = 20 // a key's load is several times that: every bucket runs dry
	)
	limit := core.PerSecond(rate)
	srv := pgtest.Start(t)
	pool := newPool(t, srv)
	local, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	b, err := policy.NewBreaker(newStore(t, pool, pgstore.Config{Table: "recovery"}), policy.WithMode(mode), policy.WithLocal(local))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	var (
		mu   sync.Mutex
		recs []record
		wg   sync.WaitGroup
	)
	stop := make(chan struct{})
	for g := range goroutines {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := (g + i) % keys
				start := time.Now()
				d, err := b.Apply(context.Background(), core.Request{Key: fmt.Sprint("key", k), Algorithm: algorithms.TokenBucket, Limit: limit, Cost: 1})
				r := record{start: start, end: time.Now(), key: k, allowed: d.Allowed, source: d.Source, err: err}
				mu.Lock()
				recs = append(recs, r)
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	var once sync.Once
	stopLoad := func() []record {
		once.Do(func() { close(stop) })
		wg.Wait()
		return recs
	}
	defer stopLoad() // on a failure part way
	storeDecided := func(after time.Time) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, r := range recs {
				if r.err == nil && r.source == core.SourceStore && r.start.After(after) {
					return true
				}
			}
			return false
		}
	}
	began := time.Now()
	waitFor(t, "a decision from the store", storeDecided(began))
	killing := time.Now()
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now() // the server and its backends are gone
	waitFor(t, "the circuit to open", func() bool { return b.State() == policy.Open })
	opened := time.Now()
	time.Sleep(time.Until(killing.Add(2 * time.Second))) // down for a probe or two, as R-04
	restarting := time.Now()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	waitFor(t, "a decision from the store after the restart", storeDecided(restarted))
	firstOK := time.Now()
	waitFor(t, "the circuit to close", func() bool { return b.State() == policy.Closed })
	closed := time.Now()
	time.Sleep(time.Until(restarted.Add(5 * time.Second)))
	all := stopLoad()

	var errs, down, downStore int
	admitted := make([]int64, keys)
	var last time.Time
	for _, r := range all {
		switch {
		case r.err != nil:
			if errs++; errs <= 3 {
				t.Errorf("a caller got an error: %v", r.err)
			}
		case r.start.After(killed) && r.end.Before(restarting):
			down++
			if r.source == core.SourceStore {
				downStore++
			}
		case r.start.After(restarting) && r.source == core.SourceStore && r.allowed:
			admitted[r.key]++
			if r.end.After(last) {
				last = r.end
			}
		}
	}
	if downStore > 0 {
		t.Errorf("%d of %d decisions made while the server was down claim the store", downStore, down)
	}
	bound := limit.Burst() + int64(rate*last.Sub(restarting).Seconds())
	for k, n := range admitted {
		if n > bound {
			t.Errorf("key %d: the store admitted %d after the restart, over %v; the limit allows %d", k, n, last.Sub(restarting), bound)
		}
	}
	t.Logf("%v: opened %v after the kill; restarted %v later; the store decided again %v and the circuit closed %v after the restart; %d decisions while down, all the mode's; admitted by the store per key after the restart %v, at most %d each; %+v",
		mode, opened.Sub(killing).Round(time.Millisecond), restarting.Sub(opened).Round(time.Millisecond),
		firstOK.Sub(restarted).Round(time.Millisecond), closed.Sub(restarted).Round(time.Millisecond), down, admitted, bound, b.Stats())
}
