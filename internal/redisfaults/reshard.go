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

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redisscript"
	"github.com/sluicehq/sluice/redistest"
)

// MoveSlot moves the slot of key (a Redis key) from its owner in c to
// another master, as
// `redis-cli --cluster reshard` moves each of its slots, but one key at a
// time with pause between keys, so that the slot stays half-moved (its
// keys split between the nodes, the source MIGRATING and the target
// IMPORTING) long enough for the load to meet ASK redirections and
// TRYAGAIN: the target IMPORTING and the source MIGRATING, each key
// MIGRATEd, then every node told the slot's new owner. It returns the
// target.
func MoveSlot(t testing.TB, c *redistest.Cluster, key string, pause time.Duration) *redistest.Server {
	t.Helper()
	slot := redistest.Slot(key)
	src, err := c.Owner(key)
	if err != nil {
		t.Fatal(err)
	}
	var dst *redistest.Server
	servers := c.Servers()
	for _, s := range servers {
		if s != src && dst == nil {
			dst = s
		}
	}
	if src == nil || dst == nil {
		t.Fatalf("slot %d: no owner and other master among %v", slot, c.Addrs())
	}
	srcID, dstID := nodeID(t, src), nodeID(t, dst)
	n := strconv.Itoa(slot)
	do(t, dst, "CLUSTER", "SETSLOT", n, "IMPORTING", srcID)
	do(t, src, "CLUSTER", "SETSLOT", n, "MIGRATING", dstID)
	for {
		r := do(t, src, "CLUSTER", "GETKEYSINSLOT", n, "1")
		keys, err := r.Strings()
		if err != nil {
			t.Fatalf("CLUSTER GETKEYSINSLOT: %v", err)
		}
		if len(keys) == 0 {
			break
		}
		time.Sleep(pause)
		do(t, src, "MIGRATE", "127.0.0.1", strconv.Itoa(dst.Port()), "", "0", "5000", "KEYS", keys[0])
	}
	time.Sleep(pause)
	for _, s := range []*redistest.Server{dst, src} {
		do(t, s, "CLUSTER", "SETSLOT", n, "NODE", dstID)
	}
	for _, s := range servers {
		if s != src && s != dst {
			do(t, s, "CLUSTER", "SETSLOT", n, "NODE", dstID)
		}
	}
	return dst
}

func nodeID(t testing.TB, s *redistest.Server) string {
	t.Helper()
	id, err := do(t, s, "CLUSTER", "MYID").String()
	if err != nil {
		t.Fatalf("CLUSTER MYID: %v", err)
	}
	return strings.TrimSpace(id)
}

func do(t testing.TB, s *redistest.Server, args ...string) redistest.Reply {
	t.Helper()
	r, err := s.Do(args...)
	if err != nil {
		t.Fatalf("%s on %s: %v", strings.Join(args, " "), s.Addr(), err)
	}
	return r
}

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

// ReshardUnderLoad decides a stack of two rules (a token bucket and a
// sliding window log, 200/s with a burst of 200) on one hot user key
// from 64 goroutines, through store on cluster c with key prefix prefix,
// while [MoveSlot] moves the key's slot to another master with pause
// between keys; the load goes on for a second after the move. It returns
// the decisions, what the store allowed against what the limit admits
// over the load's span, the decisions a breaker's mode answered, and the
// errors by kind.
func ReshardUnderLoad(t *testing.T, c *redistest.Cluster, store core.Store, prefix string, pause time.Duration) ReshardResult {
	limit := core.PerSecond(200)
	stack, err := core.NewStack(store,
		core.Rule{Name: "bucket", Algorithm: algorithms.TokenBucket, Limit: limit},
		core.Rule{Name: "log", Algorithm: algorithms.SlidingWindowLog, Limit: limit},
	)
	if err != nil {
		t.Fatal(err)
	}
	const key = "user:hot"
	state := redisscript.Key(prefix, key, "bucket") // every rule's state shares its slot
	ctx := context.Background()
	// Warm: the keys exist, so the move has something to migrate.
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
	MoveSlot(t, c, state, pause)
	took := time.Since(moved)
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	span := time.Since(start)
	bound := limit.Burst() + int64(span.Seconds()*float64(limit.Rate())) + 1
	return ReshardResult{Decisions: decisions.Load(), Allowed: admits.Load(), Degraded: degraded.Load(), Errors: errs, Bound: bound, Took: took}
}

// CheckReshard checks what [ReshardUnderLoad] saw: decisions made, none
// over the limit, none failed with CROSSSLOT, and at most maxShare of
// them failed (the clients follow MOVED and ASK, the stores retry the
// TRYAGAIN of a multi-key call on a half-moved slot for 7 ms) or, behind
// a breaker, were answered by its mode instead. Behind a breaker no
// error may reach the caller at all.
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
		if breaker || kind == "CROSSSLOT" {
			t.Errorf("%d decisions failed with %s", n, kind)
		}
	}
	if share := float64(r.Degraded+failed) / float64(max(r.Decisions, 1)); share > maxShare {
		t.Errorf("%.2f%% of the decisions failed or were the breaker's, want at most %.2f%%", 100*share, 100*maxShare)
	}
}
