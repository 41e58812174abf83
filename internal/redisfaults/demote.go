package redisfaults

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
)

// Replicate makes replica a replica of primary (REPLICAOF) and waits, for
// up to 10 s, until its link to the primary is up.
func Replicate(t testing.TB, replica, primary *redistest.Server) {
	t.Helper()
	if _, err := replica.Do("REPLICAOF", "127.0.0.1", strconv.Itoa(primary.Port())); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		info := Info(t, replica, "replication")
		if strings.Contains(info, "master_link_status:up") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica did not sync within 10 s:\n%s", info)
		}
	}
}

// Swap promotes replica (REPLICAOF NO ONE), then demotes primary to its
// replica: between the two both accept writes.
func Swap(t testing.TB, primary, replica *redistest.Server) {
	t.Helper()
	if _, err := replica.Do("REPLICAOF", "NO", "ONE"); err != nil {
		t.Fatal(err)
	}
	if _, err := primary.Do("REPLICAOF", "127.0.0.1", strconv.Itoa(replica.Port())); err != nil {
		t.Fatal(err)
	}
}

// DemotedPrimary is what [CheckDemotedPrimary] saw.
type DemotedPrimary struct {
	ReadOnly, Others, FromNew int64         // READONLY errors, other errors, admissions begun after the switch
	LastReadOnly, FirstNew    time.Duration // from the switch; -1 if none
}

// CheckDemotedPrimary is a failover that repoints an address (R-08's
// variant, the scenario of envoyproxy/ratelimit#1191): 16 goroutines
// decide through store, a store on a client of proxy, which leads to
// primary, a server replicated by replica ([Replicate]). The replica is
// promoted and the primary demoted ([Swap]), so that the client's
// connections meet READONLY; half a second later the proxy sends new
// connections to the new primary, as a repointed DNS name or Kubernetes
// Service does, while those open stay with the old one. The client must
// reach the new primary without a restart: READONLY must stop, and an
// admission (a write, so the new primary's) must come, within a second of
// the switch.
func CheckDemotedPrimary(t *testing.T, store core.Store, proxy *redistest.Proxy, primary, replica *redistest.Server) DemotedPrimary {
	t.Helper()
	var (
		readonly, others, fromNew atomic.Int64
		lastReadonly, firstNew    atomic.Int64 // Unix ns
		switched                  atomic.Int64 // Unix ns; 0 before the switch
		stop                      = make(chan struct{})
		wg                        sync.WaitGroup
	)
	for g := range 16 {
		wg.Go(func() {
			req := core.Request{Key: "demoted" + strconv.Itoa(g), Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(1 << 20)}}
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now().UnixNano()
				d, err := store.Apply(context.Background(), req)
				switch {
				case core.Classify(err).Type == "READONLY":
					readonly.Add(1)
					lastReadonly.Store(time.Now().UnixNano())
				case err != nil:
					others.Add(1)
				case d.Allowed && switched.Load() != 0 && start >= switched.Load():
					fromNew.Add(1)
					firstNew.CompareAndSwap(0, time.Now().UnixNano())
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	Swap(t, primary, replica)
	time.Sleep(500 * time.Millisecond)
	sw := time.Now()
	switched.Store(sw.UnixNano())
	proxy.SetTarget(replica.Addr())
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	wg.Wait()

	since := func(ns int64) time.Duration {
		if ns == 0 {
			return -1
		}
		return time.Unix(0, ns).Sub(sw)
	}
	r := DemotedPrimary{ReadOnly: readonly.Load(), Others: others.Load(), FromNew: fromNew.Load(),
		LastReadOnly: since(lastReadonly.Load()), FirstNew: since(firstNew.Load())}
	t.Logf("%d READONLY, the last %v from the switch; %d other errors; %d admissions from the new primary, the first %v after the switch",
		r.ReadOnly, r.LastReadOnly.Round(time.Millisecond), r.Others, r.FromNew, r.FirstNew.Round(time.Millisecond))
	switch {
	case r.ReadOnly == 0:
		t.Error("no READONLY: the demotion did not reach the store")
	case r.FirstNew < 0:
		t.Error("no decision from the new primary within 1.5 s of the switch")
	case r.FirstNew > time.Second:
		t.Errorf("the first decision from the new primary came %v after the switch, want within 1 s", r.FirstNew)
	}
	if r.LastReadOnly > time.Second {
		t.Errorf("READONLY still came %v after the switch: a connection to the old primary is still in use", r.LastReadOnly)
	}
	return r
}
