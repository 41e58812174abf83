package rueidisstore_test

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
	"github.com/sluicehq/sluice/internal/rediserr"
	"github.com/sluicehq/sluice/redistest"
)

// TestDemotedPrimary is a failover that repoints an address (R-08's
// variant): 16 goroutines decide through a proxy to the primary, the
// replica is promoted and the primary demoted to its replica, so that the
// store's connections meet READONLY; then the proxy sends new connections
// to the new primary, as a repointed DNS name does, while those open stay
// with the old one. rueidis would keep them: the store makes it dial
// again, so that READONLY stops and decisions come from the new primary
// within a second of the switch, with no restart. Without the store's
// QUITs, READONLY went on until the test's end.
func TestDemotedPrimary(t *testing.T) {
	t.Parallel()
	primary, replica := redistest.Start(t), redistest.Start(t)
	do := func(s *redistest.Server, args ...string) {
		t.Helper()
		if _, err := s.Do(args...); err != nil {
			t.Fatalf("%s: %v", strings.Join(args, " "), err)
		}
	}
	do(replica, "REPLICAOF", "127.0.0.1", strconv.Itoa(primary.Port()))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r, err := replica.Do("INFO", "replication")
		if err != nil {
			t.Fatal(err)
		}
		if info, _ := r.String(); strings.Contains(info, "master_link_status:up") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the replica did not sync within 10 s")
		}
	}
	proxy := redistest.NewProxy(t, primary.Addr())
	store := newStore(t, newClient(t, proxy.Addr()))

	var (
		readonly, other, fromNew atomic.Int64
		lastReadonly, firstNew   atomic.Int64 // Unix ns
		switched                 atomic.Int64 // Unix ns; 0 before the switch
		stop                     = make(chan struct{})
		wg                       sync.WaitGroup
	)
	for g := range 16 {
		wg.Go(func() {
			req := core.Request{Key: "demoted" + strconv.Itoa(g), Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(1 << 20), Cost: 1}
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now().UnixNano()
				d, err := store.Apply(context.Background(), req)
				switch code, _ := rediserr.Code(err); {
				case code == "READONLY":
					readonly.Add(1)
					lastReadonly.Store(time.Now().UnixNano())
				case err != nil:
					other.Add(1)
				case d.Allowed && switched.Load() != 0 && start >= switched.Load():
					// Written, so by a primary: the new one.
					fromNew.Add(1)
					firstNew.CompareAndSwap(0, time.Now().UnixNano())
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	do(replica, "REPLICAOF", "NO", "ONE")
	do(primary, "REPLICAOF", "127.0.0.1", strconv.Itoa(replica.Port()))
	time.Sleep(500 * time.Millisecond)
	sw := time.Now()
	switched.Store(sw.UnixNano())
	proxy.SetTarget(replica.Addr())
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	wg.Wait()

	since := func(ns int64) time.Duration {
		if ns == 0 {
			return -1 // never
		}
		return time.Unix(0, ns).Sub(sw)
	}
	t.Logf("%d READONLY, the last %v from the switch; %d other errors; %d admissions from the new primary, the first %v after the switch",
		readonly.Load(), since(lastReadonly.Load()).Round(time.Millisecond), other.Load(), fromNew.Load(), since(firstNew.Load()).Round(time.Millisecond))
	switch {
	case readonly.Load() == 0:
		t.Fatal("no READONLY: the demotion did not reach the store")
	case firstNew.Load() == 0:
		t.Fatal("no decision from the new primary within 1.5 s of the switch")
	case since(firstNew.Load()) > time.Second:
		t.Errorf("the first decision from the new primary came %v after the switch, want within 1 s", since(firstNew.Load()))
	}
	if last := since(lastReadonly.Load()); last > time.Second {
		t.Errorf("READONLY still came %v after the switch: a connection to the old primary is still in use", last)
	}
}
