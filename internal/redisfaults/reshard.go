package redisfaults

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
)

// ReshardResult is what [ReshardUnderLoad] saw.
type ReshardResult struct {
	Decisions int64
	Allowed   int64            // allowed by the store (core.SourceStore)
	Degraded  int64            // answered by a breaker's mode instead
	Errors    map[string]int64 // by kind: the Redis error code in the text, else its first word
	Bound     int64            // burst + rate × the load's span
	Took      time.Duration    // the slot's move
}

func (r ReshardResult) String() string {
	return fmt.Sprintf("%d decisions, %d allowed by the store (bound %d), %d degraded (%.2f%%), errors %v, the move took %v",
		r.Decisions, r.Allowed, r.Bound, r.Degraded, 100*float64(r.Degraded)/float64(max(r.Decisions, 1)), r.Errors, r.Took.Round(time.Millisecond))
}

// Reshard's shape: the lowest slots of a master move, the hot key's
// among them, its slot holding junkKeys other keys, migrated pipeline at
// a time. A MIGRATE of one key at a time always splits the stack's two
// states (written by one script call, so next to each other in the
// slot's keys) between the nodes for a moment; with redis-cli's 10 at a
// time, they moved together in most runs.
const (
	reshardSlots = 16
	junkKeys     = 1000
	pipeline     = 1
)

// ReshardUnderLoad decides a stack of two rules (a token bucket and a
// sliding window log, 200/s with a burst of 200) on one hot user key
// from 64 goroutines, through store on cluster c, whose keys keys names,
// while redis-cli --cluster reshard moves 16 slots, the key's among
// them, to another master ([redistest.Cluster.Reshard]), one key per
// MIGRATE. The key's slot also holds 1,000 other keys, so that it stays
// half-moved for as many MIGRATE calls, and the stack's two states sit
// on two nodes between two of them. The load goes on for a second after
// the move; then every key of the slot must be on the new master. It returns
// the decisions, what the store allowed against what the limit admits
// over the load's span, the decisions a breaker's mode answered, and the
// errors by kind.
func ReshardUnderLoad(t *testing.T, c *redistest.Cluster, store core.Store, keys Keyed) ReshardResult {
	limit := core.PerSecond(200)
	stack, err := sluice.NewStack(store,
		sluice.Rule{Name: "bucket", Algorithm: algorithms.TokenBucket, Limit: limit},
		sluice.Rule{Name: "log", Algorithm: algorithms.SlidingWindowLog, Limit: limit},
	)
	if err != nil {
		t.Fatal(err)
	}
	// A user whose states (every rule's shares the slot) are in one of
	// the lowest slots, which redis-cli moves first; the owner of slot 0
	// is the source.
	var key, state string
	for i := 0; ; i++ {
		key = "user:hot" + strconv.Itoa(i)
		state = keys.Key(key, core.Named(algorithms.TokenBucket, "bucket"))
		if redistest.Slot(state) < reshardSlots {
			break
		}
	}
	src, err := c.Owner(state)
	if err != nil {
		t.Fatal(err)
	}
	var dst *redistest.Server
	for _, s := range c.Servers() {
		if s != src && dst == nil {
			dst = s
		}
	}
	junk := strings.TrimSuffix(state, "bucket") + "junk:"
	for i := range junkKeys {
		if _, err := src.Do("SET", junk+strconv.Itoa(i), "x", "PX", "600000"); err != nil {
			t.Fatalf("SET on %s: %v", src.Addr(), err)
		}
	}
	ctx := context.Background()
	// Warm: the states exist, so the move has them to migrate.
	if _, err := stack.Allow(ctx, key, key); err != nil {
		t.Fatalf("a decision before the move: %v", err)
	}

	var (
		stop              = make(chan struct{})
		wg                sync.WaitGroup
		decisions, admits atomic.Int64
		degraded          atomic.Int64
		mu                sync.Mutex
		errs              = map[string]int64{}
	)
	start := time.Now()
	for range 64 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				v, err := stack.Allow(ctx, key, key)
				decisions.Add(1)
				if err != nil {
					word, _, _ := strings.Cut(err.Error(), " ")
					var kind string
					for _, code := range []string{"CROSSSLOT", "TRYAGAIN", "ASK", "MOVED", "CLUSTERDOWN"} {
						if strings.Contains(err.Error(), code) {
							kind = code
							break
						}
					}
					if kind == "" {
						kind = word
					}
					mu.Lock()
					errs[kind]++
					if errs[kind] == 1 {
						t.Logf("first %s error: %v", kind, err)
					}
					mu.Unlock()
					continue
				}
				switch {
				case v.Source != core.SourceStore:
					degraded.Add(1)
				case v.Allowed:
					admits.Add(1)
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	moved := time.Now()
	err = c.Reshard(src, dst, reshardSlots, pipeline)
	took := time.Since(moved)
	if err == nil {
		time.Sleep(time.Second)
	}
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if owner, err := c.Owner(state); err != nil || owner != dst {
		t.Fatalf("after the reshard slot %d is served by %v (%v), want %s", redistest.Slot(state), owner, err, dst.Addr())
	}
	slot := strconv.Itoa(redistest.Slot(state))
	for _, node := range []struct {
		s    *redistest.Server
		want int64
	}{{src, 0}, {dst, junkKeys + 2}} { // the junk and the stack's two states
		r, err := node.s.Do("CLUSTER", "COUNTKEYSINSLOT", slot)
		if err != nil {
			t.Fatalf("CLUSTER COUNTKEYSINSLOT on %s: %v", node.s.Addr(), err)
		}
		if n, err := r.Int(); err != nil || n != node.want {
			t.Fatalf("after the reshard %s holds %d keys (%v) of slot %s, want %d", node.s.Addr(), n, err, slot, node.want)
		}
	}
	span := time.Since(start)
	bound := limit.Burst() + int64(span.Seconds()*float64(limit.Rate())) + 1
	return ReshardResult{Decisions: decisions.Load(), Allowed: admits.Load(), Degraded: degraded.Load(), Errors: errs, Bound: bound, Took: took}
}

// CheckReshard checks what [ReshardUnderLoad] saw: decisions made, none
// over the limit, none failed with CROSSSLOT, MOVED, ASK or anything but
// TRYAGAIN (the clients follow MOVED and ASK), and at most maxShare of
// them failed with TRYAGAIN (the stores retry the TRYAGAIN of a multi-key
// call on a half-moved slot for 7 ms, which a loaded machine may
// outlast) or, behind a breaker, were answered by its mode instead.
// Behind a breaker no error may reach the caller at all.
func CheckReshard(t *testing.T, r ReshardResult, maxShare float64, breaker bool) {
	t.Helper()
	if r.Decisions < 1000 {
		t.Errorf("only %d decisions during the move: the test proves little", r.Decisions)
	}
	if r.Allowed > r.Bound {
		t.Errorf("%d allowed, over the limit's %d: the move lost state", r.Allowed, r.Bound)
	}
	var failed int64
	for kind, n := range r.Errors {
		failed += n
		if breaker || kind != "TRYAGAIN" {
			t.Errorf("%d decisions failed with %s", n, kind)
		}
	}
	if share := float64(r.Degraded+failed) / float64(max(r.Decisions, 1)); share > maxShare {
		t.Errorf("%.2f%% of the decisions failed or were the breaker's, want at most %.2f%%", 100*share, 100*maxShare)
	}
}
