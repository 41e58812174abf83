package pgstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores/pgstore"
	"github.com/sluicehq/sluice/stores/pgstore/pgtest"
)

// benchLimit is the benchmarks' limit: most decisions admit, so most
// write.
var benchLimit = core.PerSecond(1000).WithBurst(1000)

// BenchmarkDecide runs the store and the reference approach (a
// transaction of SELECT … FOR UPDATE, a decision in Go, UPDATE and
// COMMIT) side by side on one server, on one hot key and on 10,000 keys,
// from 1, 16 and 64 goroutines over a pool of 16 connections. It reports
// decisions/s, round trips per decision and the over-grant: admissions
// beyond burst + rate × elapsed on any key, which must be 0.
func BenchmarkDecide(b *testing.B) {
	srv := pgtest.Start(b)
	cfg, err := pgxpool.ParseConfig(srv.URL())
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	for _, keys := range []int{1, 10000} {
		for _, g := range []int{1, 16, 64} {
			for _, kind := range []string{"store", "reference"} {
				b.Run(fmt.Sprintf("keys=%d/goroutines=%d/%s", keys, g, kind), func(b *testing.B) {
					table := fmt.Sprintf("bench_%s_%d", kind, tables.Add(1))
					var decide func(ctx context.Context, req core.Request) (core.Decision, error)
					var trips func() uint64
					if kind == "store" {
						s := newStore(b, pool, pgstore.Config{Table: table})
						defer s.Close()
						decide = s.Apply
						trips = func() uint64 { return s.Stats().Calls }
					} else {
						r := newReference(b, pool, table)
						decide = r.apply
						trips = r.trips.Load
					}
					benchDecide(b, decide, trips, keys, g)
				})
			}
		}
	}
}

// benchDecide makes b.N decisions from g goroutines over keys keys, and
// reports what BenchmarkDecide says.
func benchDecide(b *testing.B, decide func(context.Context, core.Request) (core.Decision, error), trips func() uint64, keys, g int) {
	ctx := context.Background()
	admitted := make([]atomic.Int64, keys)
	var next atomic.Int64
	before := trips()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, g)
	for range g {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				k := int(i) % keys
				d, err := decide(ctx, core.Request{Key: fmt.Sprint("k", k), Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: benchLimit}})
				if err != nil {
					errs <- err
					return
				}
				if d.Allowed {
					admitted[k].Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	bound := benchLimit.Burst() + int64(float64(benchLimit.Rate())*elapsed.Seconds())
	var over int64
	for k := range admitted {
		over = max(over, admitted[k].Load()-bound)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(float64(trips()-before)/float64(b.N), "trips/decision")
	b.ReportMetric(float64(over), "overgrant")
}

// reference is the common way to keep a limiter in PostgreSQL, which
// Bucket4j's JDBC stores follow: a transaction that locks the key's row
// (SELECT … FOR UPDATE, with the server's clock), decides in the client
// and writes (UPDATE), then commits. Its rows are made beforehand, so the
// SELECT always finds one to lock.
type reference struct {
	pool  *pgxpool.Pool
	table string
	trips atomic.Uint64
}

func newReference(b *testing.B, pool *pgxpool.Pool, table string) *reference {
	ctx := context.Background()
	r := &reference{pool: pool, table: pgx.Identifier{table}.Sanitize()}
	if _, err := pool.Exec(ctx, "CREATE UNLOGGED TABLE "+r.table+" (k text PRIMARY KEY, t bigint, a bigint, b bigint, c bigint, e bigint) WITH (fillfactor = 50)"); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO "+r.table+" SELECT 'k' || i, 0, 0, 0, 0, 0 FROM generate_series(0, 9999) i"); err != nil {
		b.Fatal(err)
	}
	return r
}

// apply decides req in one transaction of three or four round trips.
func (r *reference) apply(ctx context.Context, req core.Request) (core.Decision, error) {
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return core.Decision{}, err
	}
	defer tx.Rollback(ctx)
	var st core.State
	var clock int64
	err = tx.QueryRow(ctx, "SELECT t, a, b, c, e, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint FROM "+r.table+" WHERE k = $1 FOR UPDATE", req.Key).
		Scan(&st.Last, &st.Vals[0], &st.Vals[1], &st.Vals[2], &st.Expires, &clock)
	if err != nil {
		return core.Decision{}, err
	}
	trips := uint64(3) // BEGIN, SELECT, COMMIT
	d := core.Run(&st, &req, clock)
	if d.Allowed {
		if _, err := tx.Exec(ctx, "UPDATE "+r.table+" SET t = $2, a = $3, b = $4, c = $5, e = $6 WHERE k = $1", req.Key, st.Last, st.Vals[0], st.Vals[1], st.Vals[2], st.Expires); err != nil {
			return core.Decision{}, err
		}
		trips++
	}
	if err := tx.Commit(ctx); err != nil {
		return core.Decision{}, err
	}
	r.trips.Add(trips)
	return d, nil
}
