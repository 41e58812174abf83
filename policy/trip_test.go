package policy

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redisfaults"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/memstore"
	"github.com/sluicehq/sluice/stores/storetest"
)

// tripBound is how soon after a store stops answering the circuit must
// open, at any number of callers; the run of WithTrip does it in
// about four per-call deadlines (64 ms by default), five for a lone
// caller, whose calls time out one after another (80 ms).
const tripBound = 100 * time.Millisecond

// TestFastTrip blackholes the server under 1, 16 and 256 goroutines
// calling as fast as they can: the circuit opens before any caller has
// failed more than DefaultMinFailures+1 calls (one a deadline), within
// tripBound at each load on an idle machine, whereas the ratio alone, outweighed by the window's earlier
// successes, took most of a window on a busy service. The time is taken on
// the breaker's process clock: the breaker cannot count failures while
// the process does not run.
func TestFastTrip(t *testing.T) {
	t.Parallel()
	for _, cl := range clients {
		for _, n := range []int{1, 16, 256} {
			t.Run(cl.name+"/"+strconv.Itoa(n), func(t *testing.T) {
				exclusive(t)
				srv := redistest.Start(t)
				proxy := redistest.NewProxy(t, srv.Addr())
				store := cl.store(t, proxy.Addr(), nil)
				warmUp(store)
				b := newBreaker(t, store)
				l := hammer(b, n)
				time.Sleep(400 * time.Millisecond)
				settleClosed(t, b, l)
				holed, deadline, failed := b.procNow(), b.timeoutNow(), b.Stats().Failures
				proxy.Blackhole()
				_, ok := waitState(b, Open, 5*time.Second)
				opened := b.procNow()
				// The run spans deadlines as adapted meanwhile, which the
				// answers just before the blackhole may have raised.
				deadline = max(deadline, b.timeoutNow())
				l.stop()
				if !ok {
					t.Fatalf("the circuit did not open within 5 s of the blackhole (%+v)", b.Stats())
				}
				// Both ends on the breaker's process clock, on which its
				// deadlines run: the time the process did not run is not
				// the store's, and a loaded machine adds none.
				took := time.Duration(opened - holed)
				// The run spans runSpan deadlines from the first failure,
				// a deadline after the blackhole: as the deadline adapts
				// to a loaded machine's latency, so does the bound.
				bound := max(tripBound, (runSpan+2)*deadline+slack)
				failed = b.Stats().Failures - failed
				t.Logf("%d goroutines, %d calls: opened %v after the blackhole, on the process clock (deadline %v), after %d failed calls", n, l.calls.Load(), took.Round(time.Millisecond), deadline, failed)
				// Each caller's calls fail one a deadline, so the failed
				// calls count the deadlines the run took in the callers'
				// own time: a stall of a goroutine holds back its calls as
				// well as its report, where the process clock, which sees
				// the whole process's stalls and not a thread's, counts
				// it. So the bound is in failed calls a caller; the time
				// on the process clock is logged.
				perCaller := uint64(DefaultMinFailures + 1)
				switch {
				case failed > uint64(n)*perCaller:
					t.Errorf("the circuit opened after %d failed calls of %d callers, want at most %d a caller: each fails after a deadline, and %d span the run", failed, n, perCaller, DefaultMinFailures)
				case n > 1 && took > bound:
					t.Logf("over %v on the process clock, but within %d failed calls a caller: the machine held the failures' reports back", bound, perCaller)
				}
			})
		}
	}
}

// TestStallDoesNotTrip stalls the network to the server (a proxy that
// holds every byte, then delivers them) for twice the per-call deadline,
// on the breaker's clock, and at most briefStall on the wall clock, under
// 256 goroutines: the calls in flight fail together, then the server
// answers again. The circuit must stay closed: the failures come within a
// deadline or two of one another, and successes follow. A stall of ten
// deadlines, by contrast, must open it. (CLIENT PAUSE would not do: the
// server ends a pause only at its next cron tick, up to 100 ms late.)
func TestStallDoesNotTrip(t *testing.T) {
	t.Parallel()
	for _, cl := range clientsFor(briefStall) {
		t.Run(cl.name, func(t *testing.T) {
			exclusive(t)
			srv := redistest.Start(t)
			proxy := redistest.NewProxy(t, srv.Addr())
			store := cl.store(t, proxy.Addr(), nil)
			warmUp(store)
			// Both trip rules count on the process clock. When the
			// ratio's window was on the wall clock, a stall of two
			// deadlines took 952 ms of it beside CPU burners: nearly all
			// of the window, so its 256 to 512 failures outweighed the
			// window's successes (see tally.go).
			b := newBreaker(t, store)
			l := hammer(b, 256)
			defer l.stop()
			time.Sleep(400 * time.Millisecond)
			// The test needs a breaker whose deadline the store meets
			// without a fault: wait for a quiet 300 ms, in which no call
			// failed, up to five times, while the deadline adapts to the
			// latency of the machine (under the race detector, a few
			// milliseconds).
			var before Stats
			for quiet := 0; ; quiet++ {
				settleClosed(t, b, l)
				before = b.Stats()
				time.Sleep(300 * time.Millisecond)
				if now := b.Stats(); now.Failures == before.Failures && b.State() == Closed {
					before = now
					break
				}
				if quiet == 4 {
					t.Fatalf("calls fail within the %v deadline without a fault (%+v)", b.timeoutNow(), b.Stats())
				}
			}
			// A stall of n deadlines fails calls over n-1 of them: the
			// run of WithTrip spans runSpan. Both are on the breaker's
			// process clock, so the stall lasts as long on it: on a
			// loaded machine, longer on the wall clock.
			var deadline time.Duration // the breaker's per-call deadline as the stall began
			var wall time.Duration     // how long the stall lasted on the wall clock
			// stall holds the network for n deadlines on the breaker's
			// clock, and if most > 0 for at most most on the wall clock.
			stall := func(n, most time.Duration) {
				deadline = b.timeoutNow()
				p0, w0, dials := b.procNow(), time.Now(), proxy.Accepted()
				proxy.Blackhole()
				for time.Duration(b.procNow()-p0) < n*deadline && (most == 0 || time.Since(w0) < most) {
					time.Sleep(time.Millisecond)
				}
				wall = time.Since(w0)
				t.Logf("at the stall's end, %v on the breaker's clock and %v on the wall clock (deadline %v), %d new connections: %+v",
					time.Duration(b.procNow()-p0).Round(time.Millisecond), wall.Round(time.Millisecond), deadline, proxy.Accepted()-dials, b.Counts())
				proxy.Pass()
			}
			// A stall that catches no call in flight proves nothing (the
			// goroutines may all be in their pause): stall again, up to
			// three times, until one does.
			var after Stats
			for try := 0; ; try++ {
				canary := redisfaults.StartCanary()
				dials := proxy.Accepted()
				stall(2, briefStall)
				time.Sleep(300 * time.Millisecond)
				stalled := canary.Stop()
				after = b.Stats()
				if s := b.State(); s != Closed || after.Changes != before.Changes {
					t.Fatalf("a stall of two deadlines (%v on the wall clock) changed the circuit: %v, %d changes (%+v); the process stalled for %v at most; the client opened %d connections since the stall began", wall, s, after.Changes-before.Changes, after, stalled, proxy.Accepted()-dials)
				}
				if after.Failures != before.Failures {
					break
				}
				if try == 2 {
					t.Fatalf("no call failed during three stalls of two deadlines: the test proves nothing (%+v)", after)
				}
			}
			t.Logf("a stall of %v (two deadlines) failed %d calls; the circuit stayed closed", 2*deadline, after.Failures-before.Failures)
			// The circuit may have opened, and moved on to half-open,
			// before the stall ends (it lasts longer on the wall clock
			// than on the breaker's on a loaded machine): any change
			// from closed is to open.
			stall(10, 0)
			if _, ok := waitState(b, Open, time.Second); !ok && b.Stats().Changes == after.Changes {
				t.Errorf("a stall of ten deadlines did not open the circuit (%+v)", b.Stats())
			}
		})
	}
}

// briefStall is the longest, on the wall clock, that TestStallDoesNotTrip
// holds the network for its stall of two deadlines. Its clients have the
// options recommended for a deadline of briefStall, so that they give up
// on a connection (their backstop, twice that) only after the stall: a
// stall they see out is the breaker's to judge, not an outage. On a
// loaded machine the breaker's process clock can run at a quarter of the
// wall clock or slower (two deadlines of 100 ms have taken over 720 ms
// of wall, and with the race detector beside CPU burners, 400 ms of wall
// were less than one deadline).
const briefStall = 3 * time.Second

// hammerPause is the pause between one goroutine's calls per goroutine
// calling (see hammer).
const hammerPause = 125 * time.Microsecond

// hammering is n goroutines calling a breaker in a loop, and a canary.
type hammering struct {
	done  chan struct{}
	wg    sync.WaitGroup
	calls atomic.Int64
}

// settleClosed waits, under the load, for a circuit that is not closed
// before the fault to close and stay closed for a while, as rig.start
// does: a stall of the whole test process (the machine is shared) fails
// the calls in flight together and can trip it. The scenario starts from
// a closed circuit.
func settleClosed(t *testing.T, b *Breaker, l *hammering) {
	t.Helper()
	for try := 0; b.State() != Closed; try++ {
		if try == 3 {
			l.stop()
			t.Fatalf("the circuit keeps opening before the fault: %+v", b.Stats())
		}
		t.Logf("the circuit is %v before the fault (%+v); waiting for it to close", b.State(), b.Stats())
		waitState(b, Closed, DefaultOpenTimeout+5*time.Second)
		time.Sleep(400 * time.Millisecond)
	}
}

// warmUp opens a client's connections with a burst of 256 goroutines'
// calls straight to its store, as rig.start does: a cold client pays a
// handshake per connection, which a burst of first calls through the
// breaker would count against the deadline.
func warmUp(store core.Store) {
	var wg sync.WaitGroup
	for g := range 256 {
		wg.Go(func() {
			for range 20 {
				store.Apply(context.Background(), loadReq("key"+strconv.Itoa(g%loadKeys)))
			}
		})
	}
	wg.Wait()
}

// hammer starts n goroutines calling b with loadReq on loadKeys keys.
// Each goroutine pauses n × hammerPause between its
// calls, so that the load offered is about the same at any n: several
// thousand calls a second, as much as the test machine (two shared cores,
// the race detector) answers within the per-call deadline. 256 goroutines
// calling flat out would time out with a healthy store.
func hammer(b *Breaker, n int) *hammering {
	h := &hammering{done: make(chan struct{})}
	for g := range n {
		h.wg.Go(func() {
			ctx := context.Background()
			key := "key" + strconv.Itoa(g%loadKeys)
			// Spread the first calls over one pause: steady traffic,
			// not n calls at once.
			time.Sleep(time.Duration(g) * hammerPause)
			for {
				select {
				case <-h.done:
					return
				default:
				}
				b.Apply(ctx, loadReq(key))
				h.calls.Add(1)
				time.Sleep(time.Duration(n) * hammerPause)
			}
		})
	}
	return h
}

func (h *hammering) stop() {
	select {
	case <-h.done:
	default:
		close(h.done)
	}
	h.wg.Wait()
}

// timeoutNow returns b's per-call deadline as it has adapted.
func (b *Breaker) timeoutNow() time.Duration { return time.Duration(b.deadlines.timeout.Load()) }

// maxDeadline returns the most b's per-call deadline can be: its
// ceiling, which a call's latency bound allows for, since the deadline
// in force when a fault began may have adapted that far.
func (b *Breaker) maxDeadline() time.Duration { return time.Duration(b.deadlines.ceiling) }

// TestRunOfRefusals checks, in virtual time, what a run of failures is
// weighed in once Redis's latency has raised the per-call deadline to its
// ceiling: a run of refusals (errors the store answered, as a killed or
// OOM Redis gives) opens the circuit after three deadlines at the floor,
// which no stall of the process can bring about, while a run of timeouts
// (a blackhole) must span three deadlines as adapted, which a busy host's
// stalls may need. The window's earlier successes outweigh the failures
// throughout, so the run, not the ratio, opens the circuit.
func TestRunOfRefusals(t *testing.T) {
	t.Parallel()
	for _, fault := range []string{"refused", "blackholed"} {
		t.Run(fault, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem, err := memstore.New(memstore.Config{})
				if err != nil {
					t.Fatal(err)
				}
				f := storetest.NewFaulty(mem)
				b := newBreaker(t, f)
				stop := make(chan struct{})
				var wg sync.WaitGroup
				defer func() {
					close(stop)
					wg.Wait()
					f.Heal()
					time.Sleep(time.Second) // the calls still detached end
				}()
				for g := range 64 {
					wg.Go(func() {
						req := core.Request{Key: "k" + strconv.Itoa(g), Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(1000)}}
						time.Sleep(time.Duration(g) * 10 * time.Millisecond / 64) // a steady flow of calls
						for {
							select {
							case <-stop:
								return
							default:
							}
							req.Terms = &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(1000), Now: time.Now()}
							b.Apply(context.Background(), req)
							time.Sleep(10 * time.Millisecond)
						}
					})
				}
				// Replies slow down step by step, as a host gets busier,
				// and the deadline follows them up to its ceiling.
				for _, lat := range []time.Duration{2, 5, 10, 20, 40} {
					f.SetLatency(lat * time.Millisecond)
					time.Sleep(500 * time.Millisecond)
				}
				if got := b.timeoutNow(); got != DefaultMaxTimeout || b.BreakerChanges() != 0 {
					t.Fatalf("over replies of 40 ms the deadline adapted to %v, want its ceiling %v, and the circuit changed state %d times", got, DefaultMaxTimeout, b.BreakerChanges())
				}
				began := time.Now()
				if fault == "refused" {
					f.SetLatency(0)
					f.Fail(storetest.ErrOutage)
				} else {
					defer f.Blackhole()()
				}
				opened, ok := waitState(b, Open, 5*time.Second)
				took := opened.Sub(began)
				if !ok {
					t.Fatalf("the circuit did not open within 5 s (%+v)", b.Stats())
				}
				t.Logf("%s: opened %v after the fault (deadline %v, floor %v)", fault, took, DefaultMaxTimeout, DefaultTimeout)
				lo, hi := runSpan*DefaultTimeout, (runSpan+2)*DefaultTimeout
				if fault == "blackholed" {
					lo, hi = runSpan*DefaultMaxTimeout, (runSpan+2)*DefaultMaxTimeout
				}
				if took < lo || took > hi {
					t.Errorf("%s: the circuit opened %v after the fault, want between %v and %v", fault, took, lo, hi)
				}
			})
		})
	}
}
