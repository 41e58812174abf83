package composetest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redisfaults"
	"github.com/sluicehq/sluice/redistest"
)

// TestStackWait has 64 goroutines Wait on a two-rule stack through the
// chain over each Redis store, for 3 s on the server's clock: a per-user
// rule of 20/s (two users) and a shared rule of 10/s in bursts of 5. The
// shared rule binds: after its burst, admissions come one every 100 ms.
// Each Wait is one reservation of both rules in one script call, and each
// goroutine ends with one reservation that could not fit before the
// deadline, which charges nothing (as docs/composition.md says of
// Limiter.Wait); so the server runs one script per admission plus one per
// goroutine.
//
// It does not run in parallel with the other tests, whose load would only
// blur the timing.
func TestStackWait(t *testing.T) {
	const (
		goroutines = 64
		rate       = 10 // the shared rule's, per second
		burst      = 5  // the shared rule's
		run        = 3 * time.Second
	)
	srv := redistest.Start(t)
	for name, open := range map[string]func(t testing.TB) core.Store{
		"redisstore":   onGoRedis(newGoRedis(t, srv.Addr())),
		"rueidisstore": onRueidis(newRueidis(t, srv.Addr())),
	} {
		t.Run(name, func(t *testing.T) { // not parallel: they share the server's statistics, and timing
			ops := &byOp{Store: open(t)}
			store, counter := chain(t, ops)
			defer store.Close()
			stack, err := sluice.NewStack(store,
				// Its burst covers the shared rule's: only the shared rule
				// binds, from the first admission on.
				sluice.Rule{Name: "user", Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(2 * rate).WithBurst(2 * burst)},
				sluice.Rule{Name: "shared", Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(rate).WithBurst(burst)},
			)
			if err != nil {
				t.Fatal(err)
			}
			// Load the script and open connections, then count from zero.
			var warm sync.WaitGroup
			for range 8 {
				warm.Go(func() {
					if _, err := stack.Peek(context.Background(), "user:0", "all"); err != nil {
						t.Error(err)
					}
				})
			}
			warm.Wait()
			if t.Failed() {
				t.FailNow()
			}
			if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
				t.Fatal(err)
			}
			before := counts(counter)
			ops.reset()

			ctx, cancel := context.WithTimeout(context.Background(), run)
			defer cancel()
			start := time.Now()
			var (
				mu        sync.Mutex
				at        []time.Duration // each admission, from start
				due       []time.Time     // each admission's instant on the server's clock
				gaveUp    atomic.Int64    // Waits refused: a reservation that could not fit
				ended     atomic.Int64    // Waits the deadline ended: a reservation and its refund at most
				otherErrs = make(chan error, goroutines)
			)
			var wg sync.WaitGroup
			for g := range goroutines {
				user := fmt.Sprintf("user:%d", g%2)
				wg.Go(func() {
					for {
						v, err := stack.Wait(ctx, user, "all")
						switch {
						case err == nil:
							mu.Lock()
							at = append(at, time.Since(start))
							due = append(due, v.At.Add(v.Delay))
							mu.Unlock()
							continue
						case errors.Is(err, sluice.ErrWaitTooLong):
							gaveUp.Add(1)
						case ctx.Err() != nil, errors.Is(err, context.DeadlineExceeded):
							// Wait reports a deadline that has passed
							// before the context's timer has fired.
							ended.Add(1)
						default:
							otherErrs <- err
						}
						return
					}
				})
			}
			wg.Wait()
			close(otherErrs)
			for err := range otherErrs {
				t.Errorf("Wait: %v", err)
			}
			slices.Sort(at)
			slices.SortFunc(due, time.Time.Compare)
			n := len(at)
			if n <= burst+1 {
				t.Fatalf("%d admissions in %v", n, run)
			}
			// The burst is admitted at once, at the first admission; the
			// k-th admission after it is due k intervals after the first.
			// So the admissions after the burst, n − burst of them, span
			// from the first admission to the last: on the server's
			// clock, which no stall of this process moves.
			got := float64(n-burst) / due[n-1].Sub(due[0]).Seconds()
			apply, all, _ := counter.Counts()
			apply, all = apply-before[0], all-before[1]
			stats := redisfaults.Info(t, srv, "commandstats")
			scripts := redisfaults.InfoCount(stats, "cmdstat_evalsha", "calls") + redisfaults.InfoCount(stats, "cmdstat_eval", "calls")
			reserved, refunded, other := ops.counts()
			t.Logf("%d admissions in %v, first at %v, last at %v: %.3f/s after the burst of %d on the server's clock; %d Waits refused, %d ended by the deadline",
				n, run, at[0].Round(time.Millisecond), at[n-1].Round(time.Millisecond), got, burst, gaveUp.Load(), ended.Load())
			t.Logf("the backend saw %d ApplyAll (%d reservations, %d refunds, %d others) and %d Apply; the server ran %d scripts",
				all, reserved, refunded, other, apply, scripts)

			if got < 0.99*rate || got > 1.01*rate {
				t.Errorf("admissions came at %.3f/s after the burst, want %d/s within 1%%", got, rate)
			}
			// The burst, then one every 100ms up to the deadline: counted
			// from the start at most, and from the first admission at
			// least (a loaded machine may make it late), less one the
			// deadline may cut short.
			every := time.Second / rate
			if most, least := burst+int(run/every), burst+int((run-at[0])/every)-1; n < least || n > most {
				t.Errorf("%d admissions in %v, first at %v, want %d to %d: the burst of %d and one every %v", n, run, at[0].Round(time.Millisecond), least, most, burst, every)
			}
			if gaveUp.Load()+ended.Load() != goroutines {
				t.Errorf("%d goroutines gave up and %d were ended by the deadline, want %d in all", gaveUp.Load(), ended.Load(), goroutines)
			}
			// Every call reached the backend as one ApplyAll, and the server
			// in at most one script: concurrent ones share a call on one
			// server.
			if apply != 0 || other != 0 || scripts == 0 || scripts > all || reserved+refunded != all {
				t.Errorf("the backend saw %d ApplyAll (%d reservations, %d refunds, %d others) and %d Apply, the server ran %d scripts; want at most one script per ApplyAll, each a reservation or a refund",
					all, reserved, refunded, other, apply, scripts)
			}
			// One reservation per admission and per refused Wait. A Wait
			// the deadline ended reserved nothing (it began too late), or
			// a turn just after the deadline, which it refunded: its
			// MaxWait was measured before the call reached the server, so
			// the server grants up to a trip's time beyond the deadline.
			if refunded > ended.Load() || reserved != int64(n)+gaveUp.Load()+refunded {
				t.Errorf("%d reservations and %d refunds for %d admissions, %d refused Waits and %d ended by the deadline; want a reservation for each admission and refused Wait, and one refunded for each ended Wait at most",
					reserved, refunded, n, gaveUp.Load(), ended.Load())
			}
		})
	}
}

// byOp is a store decorator that counts the batches it forwards by
// operation.
type byOp struct {
	core.Store
	mu  sync.Mutex
	ops map[core.Op]int64
}

// ApplyAll counts the batch under its operation and forwards it.
func (b *byOp) ApplyAll(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	b.mu.Lock()
	if b.ops == nil {
		b.ops = make(map[core.Op]int64)
	}
	if len(reqs) > 0 {
		b.ops[reqs[0].Op]++
	}
	b.mu.Unlock()
	return b.Store.ApplyAll(ctx, reqs, out)
}

// counts returns the batches of reservations and of refunds, and all the
// others, counted since the last reset.
func (b *byOp) counts() (reserved, refunded, other int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for op, n := range b.ops {
		switch op {
		case core.OpReserve:
			reserved += n
		case core.OpRefund:
			refunded += n
		default:
			other += n
		}
	}
	return reserved, refunded, other
}

func (b *byOp) reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	clear(b.ops)
}
