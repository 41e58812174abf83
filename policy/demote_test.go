package policy

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redisfaults"
	"github.com/sluicehq/sluice/redistest"
)

// demoteRecovery is how soon after the address moves to the new primary
// decisions must come from it again.
const demoteRecovery = 2 * time.Second

// readonlyWatch sits under a rig's recorder and notes, as they happen, when
// the store last returned READONLY and when it first admitted a request
// that began after the switch: the recorder keeps counts, not instants.
type readonlyWatch struct {
	core.Store
	readonly atomic.Int64 // how many READONLY replies
	last     atomic.Int64 // when the last one came, in Unix ns
	switched atomic.Int64 // when the address moved, in Unix ns; 0 before
	firstOK  atomic.Int64 // when the first admission begun after it came back, in Unix ns
}

func (w *readonlyWatch) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	start := time.Now().UnixNano()
	d, err := w.Store.Apply(ctx, req)
	if core.Classify(err).Type == "READONLY" {
		w.readonly.Add(1)
		w.last.Store(time.Now().UnixNano())
	}
	// An admission writes the key: a replica, which the old primary now
	// is, answers it READONLY, so it was the new primary's.
	if sw := w.switched.Load(); err == nil && d.Allowed && sw != 0 && start >= sw {
		w.firstOK.CompareAndSwap(0, time.Now().UnixNano())
	}
	return d, err
}

// sinceNano returns the time from at to the instant v (Unix ns), or -1 if
// v is 0 (it never happened).
func sinceNano(at time.Time, v int64) time.Duration {
	if v == 0 {
		return -1
	}
	return time.Unix(0, v).Sub(at)
}

// TestFailoverDemoted is the failover by repointing an address (R-08's
// variant, the scenario of envoyproxy/ratelimit#1191): under load through
// a proxy, the replica is promoted (REPLICAOF NO ONE) and the old primary
// demoted to its replica (REPLICAOF), so that the clients, still connected
// to it, meet READONLY on every write; then the proxy sends new
// connections to the new primary, as a DNS name or a Kubernetes Service
// repointed at it does, while the connections already open stay with the
// old one. Without a restart, READONLY must stop and decisions come from
// the new primary within 2 s of the switch, and the circuit close; no
// caller sees an error (the breaker answers READONLY by its mode, and the
// new primary's NOSCRIPT by EVAL); and no key admits more than a token
// bucket allows, but for what the new primary never received: at most
// what the key admitted in the last second before the demotion.
func TestFailoverDemoted(t *testing.T) {
	t.Parallel()
	for _, cl := range clients {
		t.Run(cl.name, func(t *testing.T) {
			t.Parallel()
			exclusive(t)
			testFailoverDemoted(t, cl)
		})
	}
}

func testFailoverDemoted(t *testing.T, cl client) {
	primary := redistest.Start(t)
	replica := redistest.Start(t)
	redisfaults.Replicate(t, replica, primary)
	proxy := redistest.NewProxy(t, primary.Addr())
	watch := &readonlyWatch{Store: cl.store(t, proxy.Addr(), nil)}
	r := newRig(t, watch, WithMode(FailOpen))
	r.start(t, r.b, 500*time.Millisecond)

	// Promote first, then demote: between the two both accept writes, and
	// what the old primary admits meanwhile (and what it had not yet sent
	// the replica) is lost when it resyncs from the new one.
	promoted := time.Now()
	if _, err := replica.Do("REPLICAOF", "NO", "ONE"); err != nil {
		r.load.Stop()
		t.Fatal(err)
	}
	if _, err := primary.Do("REPLICAOF", "127.0.0.1", strconv.Itoa(replica.Port())); err != nil {
		r.load.Stop()
		t.Fatal(err)
	}
	demoted := time.Now()
	opened, ok := waitState(r.b, Open, 5*time.Second)
	if !ok {
		r.load.Stop()
		t.Fatalf("the circuit did not open within 5 s of the demotion; %d READONLY; store errors %v", watch.readonly.Load(), r.rec.errorTexts(""))
	}
	// Let the probes meet READONLY too: the circuit stays open on it.
	time.Sleep(time.Until(opened.Add(DefaultOpenTimeout + 200*time.Millisecond)))
	switched := time.Now()
	watch.switched.Store(switched.UnixNano())
	proxy.SetTarget(replica.Addr())
	closed, closedOK := waitState(r.b, Closed, DefaultOpenTimeout+5*time.Second)
	time.Sleep(time.Second)
	samples := r.load.Stop()

	r.checkNoPanicsNoErrors(t, samples)
	if n := watch.readonly.Load(); n == 0 {
		t.Errorf("the store never met READONLY: the scenario did not happen; its errors: %v", r.rec.errorTexts(""))
	}
	if r.rec.other != 0 {
		t.Errorf("%d store errors were not classified as failures: %v", r.rec.other, r.rec.errorTexts(""))
	}
	checkMode(t, FailOpen, between(samples, r.since(opened), r.since(switched)))

	// Recovery, from the switch: no READONLY after 2 s, an admission from
	// the new primary within 2 s, and the circuit closed. go-redis drops a
	// connection that answered READONLY; rueidisstore makes rueidis drop
	// its connections (QUIT).
	first := sinceNano(switched, watch.firstOK.Load())
	last := sinceNano(switched, watch.last.Load())
	switch {
	case first < 0:
		t.Errorf("no admission from the new primary within %v of the switch: %d READONLY, the last %v after the switch; %s",
			DefaultOpenTimeout+6*time.Second, watch.readonly.Load(), last.Round(time.Millisecond), describeChanges(r))
	case first > demoteRecovery && r.load.explained(sample{at: r.since(switched), took: first}, callGrace*DefaultTimeout):
		// A probe that a stall of its whole grace fails costs another
		// open timeout (as TestKillRestart).
		t.Logf("the first admission from the new primary came %v after the switch, over %v, while the process stalled for a probe's whole grace", first.Round(time.Millisecond), demoteRecovery)
	case first > demoteRecovery:
		t.Errorf("the first admission from the new primary came %v after the switch, want within %v", first.Round(time.Millisecond), demoteRecovery)
	}
	if last > demoteRecovery {
		t.Errorf("READONLY still came %v after the switch, want none after %v: a connection to the old primary is still in use", last.Round(time.Millisecond), demoteRecovery)
	}
	// The circuit closes on the probes after the first admission, unless
	// a probe on a new connection (a dial, NOSCRIPT and EVAL) outlasts
	// the deadline on a loaded machine and opens it for another open
	// timeout, as after a restart (TestKillRestart): its bound is
	// TestFailover's.
	if !closedOK {
		t.Errorf("the circuit did not close within %v of the switch: %s", DefaultOpenTimeout+5*time.Second, describeChanges(r))
	}

	// The new primary had the scripts' effects, not the scripts: its first
	// EVALSHA met NOSCRIPT, which no caller saw.
	noscript := redisfaults.InfoCount(redisfaults.Info(t, replica, "errorstats"), "errorstat_NOSCRIPT", "count")
	if noscript == 0 {
		t.Errorf("the new primary answered no NOSCRIPT: the test did not exercise the fallback")
	}

	over := demotedOverGrant(t, samples, r.since(demoted))
	// The writes the new primary may never have received: admissions by
	// calls under way between the promotion and the demotion, when both
	// accepted writes, and the old primary's last before the promotion if
	// its replica lagged.
	split := count(samples, func(s sample) bool {
		return s.source == core.SourceStore && s.allowed && s.end() >= r.since(promoted) && s.at < r.since(demoted)
	})

	closedAfter := "never closed"
	if closedOK {
		closedAfter = fmt.Sprintf("closed %v after it", closed.Sub(switched).Round(time.Millisecond))
	}
	t.Logf("promoted and demoted in %v; opened %v after the demotion, switched %v after that; %d READONLY, the last at %+v from the switch; first admission from the new primary %v after the switch, %s",
		demoted.Sub(promoted).Round(time.Millisecond), opened.Sub(demoted).Round(time.Millisecond), switched.Sub(opened).Round(time.Millisecond),
		watch.readonly.Load(), last.Round(time.Millisecond), first.Round(time.Millisecond), closedAfter)
	t.Logf("the new primary answered %d NOSCRIPT, none reached a caller; %d admissions by calls under way between the promotion and the demotion; %s; %+v; changes: %s",
		noscript, split, over, r.b.Stats(), describeChanges(r))
}

// demotedOverGrant checks each key's admissions from the store, across
// the old primary and the new: their worst excess over a token bucket of
// loadLimit, over any interval, must not exceed what the key admitted in
// the second before the demotion, the writes an asynchronous replica may
// not have received (docs/redis.md, "What Redis cannot promise"). It
// returns the figures, per key.
func demotedOverGrant(t *testing.T, samples []sample, demoted time.Duration) string {
	t.Helper()
	var desc []string
	for k := range loadKeys {
		var admitted []sample
		lastSecond := 0
		for _, s := range samples {
			if s.key != k || s.source != core.SourceStore || s.err != nil || !s.allowed {
				continue
			}
			admitted = append(admitted, s)
			if s.at >= demoted-time.Second && s.at < demoted {
				lastSecond++
			}
		}
		over, from, to := excess(loadLimit, admitted)
		if over > lastSecond {
			t.Errorf("key %d admitted %d more than a bucket of %v from %v to %v, more than the %d it admitted in the second before the demotion",
				k, over, loadLimit, from.Round(time.Millisecond), to.Round(time.Millisecond), lastSecond)
		}
		desc = append(desc, fmt.Sprintf("%d of at most %d", max(over, 0), lastSecond))
	}
	return "over-grant per key (of the second before the demotion): " + strings.Join(desc, ", ")
}

// excess returns the most that admitted, decisions of a token bucket of l,
// exceed the bucket over any interval, with that interval. A decision is
// counted in [from, to] only if its call began and ended in it, since the
// server decided at an unknown instant in between: for a bucket that
// keeps its state, the excess is never above 0.
func excess(l core.Limit, admitted []sample) (over int, from, to time.Duration) {
	over = -1 << 31
	slices.SortFunc(admitted, func(a, b sample) int { return int(a.at - b.at) })
	ends := make([]time.Duration, 0, len(admitted))
	for i, s := range admitted {
		ends = ends[:0]
		for _, u := range admitted[i:] {
			ends = append(ends, u.end())
		}
		slices.Sort(ends)
		for n, e := range ends {
			if d := n + 1 - bucketBound(l, e-s.at); d > over {
				over, from, to = d, s.at, e
			}
		}
	}
	return over, from, to
}
