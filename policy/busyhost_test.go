//go:build !race

package policy

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redisfaults"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/layered"
	"github.com/sluicehq/sluice/telemetry"
)

// The busy-host test runs the chain the docs recommend (telemetry, a
// breaker with its default options, layered, a Redis store on a client
// with docs/redis.md's options) on a healthy redis-server, under an
// open-loop load of a service's size, and disturbs the process, not
// Redis: a cold start, the process frozen 30 ms of every 230 ms (a
// container whose CPU quota is spent), and four CPU-burning processes
// beside it. Redis stays healthy throughout, so the mode may answer at
// most a tenth of a percent of the decisions, and the circuit must never
// open. The burners slow Redis too, which shares the two cores: its
// thread waits for one up to half of any 100 ms (the test logs how long,
// from the kernel's run delay: see schedWatch), and the adapted deadline
// follows that latency.
//
// It is built without the race detector, which would make the load
// itself more than the machine can run; make test runs it so.

const (
	busyRate       = 20000 // decisions a second, offered whatever the answers' speed
	busyKeys       = 2000
	busyGoroutines = 64
	// A phase is long enough for its bound to tell one stall from none:
	// a stall that times out one round of the 64 callers together is
	// 0.053 % of a 6 s phase, and was 0.107 % of a 3 s one, whose bound
	// (60 decisions) then allowed no stall at all; on this machine one
	// such round came in about half the runs, old code and new.
	busyPhase    = 6 * time.Second
	busyMaxShare = 0.001 // of the decisions, answered by the mode
)

// freezeEnv names the environment variable that makes the test binary a
// freezer (see TestMain).
const freezeEnv = "SLUICE_FREEZE_PID"

func init() {
	if pid := os.Getenv(freezeEnv); pid != "" {
		freezer(pid)
	}
}

// freeze is how long the freezer stops the process each time.
const freeze = 30 * time.Millisecond

// freezer stops the process pid for 30 ms (freeze) of every 230 ms with
// SIGSTOP and SIGCONT, until its standard input ends; it exits only after
// a SIGCONT, so it never leaves the process stopped.
func freezer(pidText string) {
	pid, err := strconv.Atoi(pidText)
	if err != nil {
		fmt.Fprintln(os.Stderr, "freezer:", err)
		os.Exit(2)
	}
	var done atomic.Bool
	go func() {
		io.Copy(io.Discard, os.Stdin)
		done.Store(true)
	}()
	for !done.Load() {
		time.Sleep(200 * time.Millisecond)
		if done.Load() {
			break
		}
		syscall.Kill(pid, syscall.SIGSTOP)
		time.Sleep(freeze)
		syscall.Kill(pid, syscall.SIGCONT)
	}
	syscall.Kill(pid, syscall.SIGCONT)
	os.Exit(0)
}

// startFreezer starts a freezer of this process, and returns a function
// that stops it and waits for it.
func startFreezer(t *testing.T) func() {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), freezeEnv+"="+strconv.Itoa(os.Getpid()))
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stop := sync.OnceFunc(func() {
		in.Close()
		cmd.Wait()
	})
	t.Cleanup(stop)
	return stop
}

// startBurners starts n CPU-burning processes, and returns a function
// that kills them by PID and waits for them.
func startBurners(t *testing.T, n int) func() {
	t.Helper()
	var cmds []*exec.Cmd
	for range n {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	stop := sync.OnceFunc(func() {
		for _, c := range cmds {
			c.Process.Kill()
		}
		for _, c := range cmds {
			c.Wait()
		}
	})
	t.Cleanup(stop)
	return stop
}

// tally counts a phase's decisions by how they were answered.
type tally struct {
	decisions, byMode, errors, late atomic.Int64
	firstErr                        atomic.Pointer[error]
	wall, proc                      histogram
	modeAt                          modeTimes
}

// histogram counts durations in buckets of 250 µs up to 100 ms. A span
// on the process clock may read a little below zero (an instant read as
// the meter records a stall is projected back from the new reading): it
// counts as zero.
type histogram [401]atomic.Int64

func (h *histogram) add(d time.Duration) { h[max(0, min(int(d/(250*time.Microsecond)), 400))].Add(1) }

// quantile returns the upper bound of the bucket holding the q quantile.
func (h *histogram) quantile(q float64) time.Duration {
	var n int64
	for i := range h {
		n += h[i].Load()
	}
	want := int64(q * float64(n))
	var c int64
	for i := range h {
		if c += h[i].Load(); c > want {
			return time.Duration(i+1) * 250 * time.Microsecond
		}
	}
	return 100 * time.Millisecond
}

func (c *tally) String() string {
	n := c.decisions.Load()
	return fmt.Sprintf("%d decisions, %d (%.3f%%) by the mode, %d errors, %d begun late; latency p99/p99.9/p99.99 wall %v/%v/%v process %v/%v/%v",
		n, c.byMode.Load(), 100*float64(c.byMode.Load())/float64(max(n, 1)), c.errors.Load(), c.late.Load(),
		c.wall.quantile(0.99), c.wall.quantile(0.999), c.wall.quantile(0.9999), c.proc.quantile(0.99), c.proc.quantile(0.999), c.proc.quantile(0.9999))
}

// openLoop offers busyRate decisions a second to stores (in turn) from
// busyGoroutines goroutines until stop is closed, counting them in
// *cur. Each goroutine keeps its own schedule: a call that returns late
// is followed at once by the ones it held up, as requests keep arriving
// at a service whatever its latency.
func openLoop(stores []core.Store, b *Breaker, cur *atomic.Pointer[tally], stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	every := time.Duration(busyGoroutines) * time.Second / busyRate
	keys := make([]string, busyKeys)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	lim := core.PerSecond(100).WithBurst(100)
	for g := range busyGoroutines {
		wg.Go(func() {
			next := time.Now().Add(every * time.Duration(g) / busyGoroutines)
			for i := g; ; i += busyGoroutines {
				if d := time.Until(next); d > 0 {
					select {
					case <-stop:
						return
					case <-time.After(d):
					}
				} else {
					select {
					case <-stop:
						return
					default:
					}
				}
				c := cur.Load()
				if time.Since(next) > time.Second {
					c.late.Add(1)
				}
				next = next.Add(every)
				s := stores[i%len(stores)]
				req := core.Request{Key: keys[i%busyKeys], Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: lim}}
				t0, p0 := time.Now(), b.procNow()
				d, err := s.Apply(context.Background(), req)
				c.wall.add(time.Since(t0))
				c.proc.add(time.Duration(b.procNow() - p0))
				c.decisions.Add(1)
				switch {
				case err != nil:
					c.errors.Add(1)
					c.firstErr.CompareAndSwap(nil, &err)
				case d.Source == core.SourceFailOpen || d.Source == core.SourceFailClosed || d.Source == core.SourceDegraded:
					c.byMode.Add(1)
					c.modeAt.add(time.Now())
				}
			}
		})
	}
	return &wg
}

// docsChain is the chain the docs recommend over remote: telemetry in
// front of a breaker with its default options, in each mode, over a
// layered store. It returns the three telemetry stores (fail-open,
// fail-closed, degrade) and the breaker, whose Degrade decides on a
// memstore of its own, as docs/outages.md shows.
func docsChain(t *testing.T, remote core.Store, onChange func(Change)) ([]core.Store, *Breaker) {
	t.Helper()
	lay, err := layered.New(remote, layered.Config{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewBreaker(lay, WithOnChange(onChange), withLocal(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	var out []core.Store
	for _, m := range []Mode{FailOpen, FailClosed, Degrade} {
		v, err := b.WithMode(m)
		if err != nil {
			t.Fatal(err)
		}
		tel, err := telemetry.New(v)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tel)
	}
	return out, b
}

func TestBusyHost(t *testing.T) {
	exclusive(t)
	for _, cl := range clients {
		t.Run(cl.name, func(t *testing.T) {
			srv := redistest.Start(t)
			var changes atomic.Int64
			var changeLog sync.Mutex
			var log []Change
			remote := cl.store(t, srv.Addr(), nil)
			chain, b := docsChain(t, remote, func(c Change) {
				changes.Add(1)
				changeLog.Lock()
				log = append(log, c)
				changeLog.Unlock()
			})
			watch := startSchedWatch(srv.PID())
			defer watch.close()
			var cur atomic.Pointer[tally]
			phases := []struct {
				name    string
				disturb func(*testing.T) func()
			}{
				// The first decisions of a new chain, then 6 s of an
				// idle host's steady state.
				{"cold start", nil},
				{"frozen 30 ms of 230 ms", startFreezer},
				{"four CPU burners", func(t *testing.T) func() { return startBurners(t, 4) }},
			}
			results := make([]*tally, len(phases))
			results[0] = &tally{}
			cur.Store(results[0])
			stop := make(chan struct{})
			wg := openLoop(chain, b, &cur, stop)
			for i, p := range phases {
				if i > 0 {
					results[i] = &tally{}
				}
				var end func()
				if p.disturb != nil {
					end = p.disturb(t)
				}
				before := changes.Load()
				began := time.Now()
				cur.Store(results[i])
				time.Sleep(busyPhase)
				if end != nil {
					end()
				}
				r, s, _ := watch.waited(began, time.Now())
				most := watch.worst(began, time.Now(), 100*time.Millisecond)
				t.Logf("%s: %v; deadline %v; circuit changes %d; %+v; waited for a core: redis-server %v (at most %v in 100 ms), this process %v%s",
					p.name, results[i], b.timeoutNow(), changes.Load()-before, b.Stats(), r.Round(time.Millisecond), most.Round(100*time.Microsecond), s.Round(time.Millisecond),
					results[i].modeAt.explain(watch, began, 150*time.Millisecond))
			}
			close(stop)
			wg.Wait()
			for i, p := range phases {
				r := results[i]
				if share := float64(r.byMode.Load()) / float64(max(r.decisions.Load(), 1)); share > busyMaxShare {
					t.Errorf("%s: %v: more than %.2f%% by the mode on a healthy Redis", p.name, r, 100*busyMaxShare)
				}
				if e := r.firstErr.Load(); e != nil {
					t.Errorf("%s: %d errors, the first: %v", p.name, r.errors.Load(), *e)
				}
			}
			if n := changes.Load(); n != 0 {
				changeLog.Lock()
				t.Errorf("the circuit changed state %d times on a healthy Redis: %v", n, log)
				changeLog.Unlock()
			}
		})
	}
}

// TestFaultsWhileFrozen injects real faults while the process is frozen
// 30 ms of every 230 ms, under the busy-host load through the docs'
// chain: a blackhole, a kill and a restart, and an OOM. Each must still
// open the circuit within 100 ms on the process clock (the freezes left
// out): a kill and an OOM however high the deadline has risen, since a
// run of the store's errors is weighed at the floor; a blackhole, whose
// calls time out, within the deadlines a run spans if the deadline has
// risen. The circuit must close within the open timeout and 1.5 s of the
// repair.
func TestFaultsWhileFrozen(t *testing.T) {
	exclusive(t)
	for _, cl := range clients {
		for _, fault := range []string{"blackhole", "kill", "OOM"} {
			t.Run(cl.name+"/"+fault, func(t *testing.T) {
				srv := redistest.Start(t, redistest.WithArgs("--maxmemory-policy", "noeviction"))
				proxy := redistest.NewProxy(t, srv.Addr())
				changes := make(chan Change, 64)
				// Only the blackhole goes through the proxy, which in
				// this process is as frozen as the rest, and slow to drain
				// the burst that follows each freeze.
				addr := srv.Addr()
				if fault == "blackhole" {
					addr = proxy.Addr()
				}
				remote := cl.store(t, addr, nil)
				chain, b := docsChain(t, remote, func(c Change) {
					select {
					case changes <- c:
					default:
					}
				})
				var cur atomic.Pointer[tally]
				cur.Store(&tally{})
				stop := make(chan struct{})
				wg := openLoop(chain, b, &cur, stop)
				defer func() { close(stop); wg.Wait() }()
				startFreezer(t)
				time.Sleep(time.Second)
				if n := b.BreakerChanges(); n != 0 {
					t.Fatalf("the circuit changed state %d times before the fault: %+v", n, b.Stats())
				}
				var inject, repair func()
				switch fault {
				case "blackhole":
					inject, repair = proxy.Blackhole, proxy.Pass
				case "kill":
					inject = func() {
						if err := srv.Kill(); err != nil {
							t.Fatal(err)
						}
					}
					repair = func() {
						if err := srv.Restart(); err != nil {
							t.Fatal(err)
						}
						if _, err := srv.Do("CONFIG", "SET", "maxmemory-policy", "noeviction"); err != nil {
							t.Fatal(err)
						}
					}
				case "OOM":
					inject = func() {
						if _, err := srv.Do("CONFIG", "SET", "maxmemory", "1"); err != nil {
							t.Fatal(err)
						}
					}
					repair = func() {
						if _, err := srv.Do("CONFIG", "SET", "maxmemory", "0"); err != nil {
							t.Fatal(err)
						}
					}
				}
				deadline, p0 := b.timeoutNow(), b.procNow()
				at := time.Now()
				inject()
				opened := waitChange(t, changes, Open, 5*time.Second)
				took, ran := opened.Sub(at), time.Duration(b.procNow()-p0)
				frozen := max(time.Since(at)-ran, 0)
				// The first failure comes a deadline after the fault, and a
				// run of failures spans runSpan deadlines, on the process
				// clock: as adapted for a blackhole's timeouts, at the floor
				// for a killed or OOM Redis's errors, however high the
				// freezes' latency has raised the deadline. Under OOM a
				// denial, which writes nothing, still succeeds and ends a
				// run: the run needs twice as long.
				run := deadline
				if fault != "blackhole" {
					run = DefaultTimeout
				}
				bound := max(tripBound, (runSpan+2)*run+slack)
				if fault == "OOM" {
					bound *= 2
				}
				t.Logf("%s: opened %v after the fault, %v on the process clock (deadline %v; the process was stalled %v meanwhile, the freezes included)", fault, took.Round(time.Millisecond), ran.Round(time.Millisecond), deadline, frozen.Round(time.Millisecond))
				if ran > bound {
					t.Errorf("the circuit opened %v after the fault on the process clock (%v on the wall clock), want within %v", ran, took, bound)
				}
				time.Sleep(500 * time.Millisecond)
				canary := redisfaults.StartCanary()
				at = time.Now()
				repair()
				closed := waitChange(t, changes, Closed, 10*time.Second)
				stalled := canary.Stop()
				t.Logf("%s: closed %v after the repair; %+v", fault, closed.Sub(at).Round(time.Millisecond), b.Stats())
				// A probe that a stall of its whole grace fails costs
				// another open timeout (as TestKillRestart). The
				// freezer's freezes are shorter; on a loaded machine a
				// freeze may last longer (the freezer waits for a core to
				// end it), or other stalls come besides.
				if took, bound := closed.Sub(at), DefaultOpenTimeout+1500*time.Millisecond; took > bound {
					if stalled >= freeze+callGrace*DefaultTimeout {
						t.Logf("the circuit closed %v after the repair, over %v, while the process stalled %v", took, bound, stalled)
					} else {
						t.Errorf("the circuit closed %v after the repair, want within %v (the process stalled %v at most)", took, bound, stalled)
					}
				}
			})
		}
	}
}

// waitChange returns when the circuit changed to want, from changes,
// failing t if it does not within limit.
func waitChange(t *testing.T, changes <-chan Change, want State, limit time.Duration) time.Time {
	t.Helper()
	timeout := time.After(limit)
	for {
		select {
		case c := <-changes:
			if c.To == want {
				return c.At
			}
		case <-timeout:
			t.Fatalf("the circuit did not change to %v within %v", want, limit)
		}
	}
}
