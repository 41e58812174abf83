package mysqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores/mysqlstore"
	"github.com/sluicehq/sluice/stores/mysqlstore/mysqltest"
)

// BenchmarkDecide runs the store on one hot key and on 10,000 keys, from
// 1 and 16 goroutines over a pool of 16 connections, and reports
// decisions/s, swaps (transactions or reads) per decision, and
// statements per decision as the server counts them (its Questions).
// Most decisions admit, so most write.
func BenchmarkDecide(b *testing.B) {
	srv := mysqltest.Start(b)
	db := newDB(b, srv)
	db.SetMaxOpenConns(16)
	limit := core.PerSecond(1000).WithBurst(1000)
	for _, keys := range []int{1, 10000} {
		for _, g := range []int{1, 16} {
			b.Run(fmt.Sprintf("keys=%d/goroutines=%d", keys, g), func(b *testing.B) {
				s := newStore(b, db, mysqlstore.Config{})
				defer s.Close()
				ctx := context.Background()
				var next atomic.Int64
				errs := make(chan error, g)
				swaps, questions := s.Stats().Calls, serverQuestions(b, db)
				b.ResetTimer()
				start := time.Now()
				var wg sync.WaitGroup
				for range g {
					wg.Go(func() {
						for i := next.Add(1) - 1; i < int64(b.N); i = next.Add(1) - 1 {
							req := core.Request{Key: fmt.Sprint("k", int(i)%keys), Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: limit}}
							if _, err := s.Apply(ctx, req); err != nil {
								errs <- err
								return
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
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
				b.ReportMetric(float64(s.Stats().Calls-swaps)/float64(b.N), "swaps/decision")
				b.ReportMetric(float64(serverQuestions(b, db)-questions-1)/float64(b.N), "statements/decision")
			})
		}
	}
}

// serverQuestions returns the statements the server has run.
func serverQuestions(b *testing.B, db *sql.DB) int64 {
	var name string
	var n int64
	if err := db.QueryRow("SHOW GLOBAL STATUS LIKE 'Questions'").Scan(&name, &n); err != nil {
		b.Fatal(err)
	}
	return n
}
