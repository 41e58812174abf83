package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redisfaults"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/internal/redisengine"
	"github.com/sluicehq/sluice/stores/redisstore"
)

// recorder is a store that decides by the Go transitions, on states it
// never forgets, and records each request with its decision.
type recorder struct {
	states map[string]*core.State
	reqs   []core.Request
	want   []core.Decision
}

func (r *recorder) Apply(_ context.Context, req core.Request) (core.Decision, error) {
	id := req.Key + "\x00" + req.Algorithm.Name()
	st := r.states[id]
	if st == nil {
		st = new(core.State)
		r.states[id] = st
	}
	d := core.Run(st, &req, 0)
	r.reqs, r.want = append(r.reqs, req), append(r.want, d)
	return d, nil
}

func (r *recorder) ApplyAll(context.Context, []core.Request, []core.Decision) error {
	return core.ErrUnsupported
}
func (r *recorder) Reset(context.Context, string, core.Algorithm) error { return nil }
func (r *recorder) Close() error                                        { return nil }

// multiCall runs algorithms.MultiScript on reqs, keyed under prefix, in
// groups of the sizes given, and returns the decisions.
func multiCall(t *testing.T, client *redis.Client, prefix string, reqs []core.Request, sizes []int) []core.Decision {
	t.Helper()
	var keys []string
	var m redisengine.Merge
	rest := reqs
	for _, n := range sizes {
		var packed, algs []byte
		for _, r := range rest[:n] {
			keys = append(keys, redisengine.Key(prefix, r.Key, r.Algorithm.Name()))
			packed = redisengine.AppendArgs(packed, &r)
			algs = append(algs, byte(algorithms.MultiIndex(r.Algorithm)))
		}
		m.Add(string(packed), string(algs))
		rest = rest[n:]
	}
	packed, algs, groups := m.Args()
	script := algorithms.MultiScript()
	reply, err := client.EvalSha(context.Background(), script.Hash(), keys, packed, algs, groups).Text()
	if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		reply, err = client.Eval(context.Background(), script.Source(), keys, packed, algs, groups).Text()
	}
	if err != nil {
		t.Fatal(err)
	}
	out := make([]core.Decision, len(reqs))
	at := make([]int, len(reqs))
	for i := range at {
		at[i] = i
	}
	if err := redisengine.Place(reply, at, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMultiScriptSinglesParity sends parity runs of every algorithm,
// interleaved, through algorithms.MultiScript in calls of 1 to 100
// groups of one request: each decision must be the Go transition's in
// turn, a request seeing the writes of those before it in its call.
func TestMultiScriptSinglesParity(t *testing.T) {
	t.Parallel()
	client := scriptClient(t)
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 5))
	// One run per algorithm, then the runs merged in a random order that
	// keeps each run's own.
	var runs [][]int
	rec := &recorder{states: map[string]*core.State{}}
	for _, alg := range algorithms.All() {
		from := len(rec.reqs)
		parity(t, rec, alg, fmt.Sprintf("each%d", seed), rng, 3000, parityLimits, parityStart)
		var run []int
		for i := from; i < len(rec.reqs); i++ {
			run = append(run, i)
		}
		runs = append(runs, run)
	}
	var order []int
	for len(runs) > 0 {
		k := rng.IntN(len(runs))
		order = append(order, runs[k][0])
		if runs[k] = runs[k][1:]; len(runs[k]) == 0 {
			runs = append(runs[:k], runs[k+1:]...)
		}
	}
	calls, repeats := 0, 0
	for len(order) > 0 {
		n := min(1+rng.IntN(100), len(order))
		chunk := order[:n]
		order = order[n:]
		reqs := make([]core.Request, n)
		sizes := make([]int, n)
		seen := map[string]bool{}
		for j, i := range chunk {
			reqs[j], sizes[j] = rec.reqs[i], 1
			id := reqs[j].Key + reqs[j].Algorithm.Name()
			if seen[id] {
				repeats++
			}
			seen[id] = true
		}
		got := multiCall(t, client, "singles:", reqs, sizes)
		calls++
		for j, i := range chunk {
			if got[j] != rec.want[i] {
				r := rec.reqs[i]
				t.Fatalf("request %d (%s, %v, cost %d, %v), %d of a call of %d:\n got %+v\nwant %+v", i, r.Algorithm.Name(), r.Op, r.Cost, r.Limit, j, n, got[j], rec.want[i])
			}
		}
	}
	t.Logf("%d requests in %d calls, %d of them on a key an earlier request of their call decided", len(rec.reqs), calls, repeats)
}

// TestMultiScriptGroupsMerged checks that groups merged into one
// MultiScript call decide, and leave their keys, exactly as the same
// groups each in a call of its own, in turn: random stacks of one to
// three rules (one operation each, some on shared users, some
// unsatisfiable, so that some groups are denied and write nothing).
func TestMultiScriptGroupsMerged(t *testing.T) {
	t.Parallel()
	client := scriptClient(t)
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 6))
	tag := fmt.Sprintf("%d:", seed)
	algs := []core.Algorithm{algorithms.TokenBucket, algorithms.GCRA, algorithms.FixedWindow, algorithms.SlidingWindowCounter, algorithms.SlidingWindowLog}
	limits := []core.Limit{core.PerSecond(5).WithBurst(3), core.PerMinute(10), core.Per(2, 300*time.Millisecond)}
	ops := []core.Op{core.OpCharge, core.OpCharge, core.OpCharge, core.OpPeek, core.OpRefund, core.OpAtMost}
	now := parityStart
	keys := map[string]bool{}
	var denied, admitted int
	for range 200 {
		var reqs []core.Request
		var sizes []int
		for range 1 + rng.IntN(20) {
			user := fmt.Sprintf("u%d", rng.IntN(4))
			op := ops[rng.IntN(len(ops))]
			size := 1 + rng.IntN(3)
			for _, k := range rng.Perm(len(algs))[:size] {
				l := limits[rng.IntN(len(limits))]
				cost := 1 + rng.Int64N(3)
				if rng.IntN(10) == 0 {
					cost = 1000 // unsatisfiable: the group is denied
				}
				reqs = append(reqs, core.Request{Key: user, Cost: cost, Op: op, Terms: &core.Terms{Algorithm: algs[k], Limit: l, Now: time.UnixMicro(now)}})
				keys[redisengine.Key("", user, algs[k].Name())] = true
			}
			sizes = append(sizes, size)
			now += rng.Int64N(200_000)
		}
		merged := multiCall(t, client, "merged"+tag, reqs, sizes)
		at := 0
		for _, n := range sizes {
			alone := multiCall(t, client, "alone"+tag, reqs[at:at+n], []int{n})
			for j := range n {
				if merged[at+j] != alone[j] {
					t.Fatalf("request %d (%s, %v, cost %d): merged %+v, alone %+v", at+j, reqs[at+j].Algorithm.Name(), reqs[at+j].Op, reqs[at+j].Cost, merged[at+j], alone[j])
				}
				if alone[j].Allowed {
					admitted++
				} else {
					denied++
				}
			}
			at += n
		}
	}
	for k := range keys {
		k = strings.TrimPrefix(k, redisengine.DefaultPrefix)
		a, errA := client.Get(context.Background(), "merged"+tag+k).Result()
		b, errB := client.Get(context.Background(), "alone"+tag+k).Result()
		if a != b || (errA == nil) != (errB == nil) {
			t.Errorf("key %s: merged %q (%v), alone %q (%v)", k, a, errA, b, errB)
		}
		ta := client.PTTL(context.Background(), "merged"+tag+k).Val()
		tb := client.PTTL(context.Background(), "alone"+tag+k).Val()
		if d := ta - tb; d < -time.Second || d > time.Second {
			t.Errorf("key %s: PTTL merged %v, alone %v", k, ta, tb)
		}
	}
	t.Logf("%d decisions admitted, %d denied, on %d keys", admitted, denied, len(keys))
	if denied == 0 || admitted == 0 {
		t.Errorf("too few of one outcome")
	}
}

// TestMergesConcurrentDecisions has 64 goroutines decide on a single
// Redis: their decisions reach Redis in fewer script calls than decisions,
// none fails, and after SCRIPT FLUSH the merged calls find their script
// again (EVAL once) without an error reaching a caller.
func TestMergesConcurrentDecisions(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	store, err := redisstore.New(client, redisstore.Config{Prefix: "merge:"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	lim := core.PerSecond(1000).WithBurst(1000)
	run := func(round int) (decisions int64) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var admitted int64
		for g := range 64 {
			wg.Go(func() {
				for i := range 100 {
					algs := []core.Algorithm{algorithms.TokenBucket, algorithms.GCRA, algorithms.FixedWindow}
					req := core.Request{Key: fmt.Sprintf("r%d:u%d", round, (g*100+i)%50), Cost: 1, Terms: &core.Terms{Algorithm: algs[i%3], Limit: lim}}
					d, err := store.Apply(context.Background(), req)
					if err != nil {
						t.Errorf("round %d: %v", round, err)
						return
					}
					mu.Lock()
					if d.Allowed {
						admitted++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		// 150 key and algorithm pairs, each with a burst of 1000: every
		// one of the 6,400 decisions fits.
		if admitted != 6400 {
			t.Errorf("round %d: admitted %d of 6400", round, admitted)
		}
		return 6400
	}
	calls := func() (evalsha, eval, noscript int64) {
		info := redisfaults.Info(t, srv, "commandstats")
		e := redisfaults.Info(t, srv, "errorstats")
		return redisfaults.InfoCount(info, "cmdstat_evalsha", "calls"), redisfaults.InfoCount(info, "cmdstat_eval", "calls"),
			redisfaults.InfoCount(e, "errorstat_NOSCRIPT", "count")
	}
	n := run(0)
	sha, eval, _ := calls()
	t.Logf("%d decisions in %d EVALSHA and %d EVAL calls", n, sha, eval)
	if sha+eval >= n {
		t.Errorf("%d decisions took %d script calls: none were merged", n, sha+eval)
	}
	if _, err := srv.Do("SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	run(1)
	sha2, eval2, noscript := calls()
	t.Logf("after SCRIPT FLUSH: %d EVALSHA and %d EVAL calls more, %d NOSCRIPT", sha2-sha, eval2-eval, noscript)
	if noscript == 0 {
		t.Errorf("no NOSCRIPT after SCRIPT FLUSH: the test did not exercise the fallback")
	}
}

// TestMultiScriptRepeats checks that MultiScript decides runs of one
// request repeated, as a hot key's concurrent callers send them, exactly
// as the Go transition does: random walks of every algorithm on a few
// keys, each request repeated one to eight times at its instant, the
// keys' requests interleaved and sent in calls of one to a hundred. A
// repeat of a decision that wrote nothing gets its reply again without
// being decided; a repeat after one that wrote is decided on the new
// state.
func TestMultiScriptRepeats(t *testing.T) {
	t.Parallel()
	client := scriptClient(t)
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	rec := &recorder{states: map[string]*core.State{}}
	var walks []*walk
	for _, alg := range algorithms.All() {
		for k := range 3 {
			if w := newWalk(alg, fmt.Sprintf("repeat%d-%d", seed, k), rng, parityLimits, parityStart); w != nil {
				walks = append(walks, w)
			}
		}
	}
	for range 3000 {
		w := walks[rng.IntN(len(walks))]
		req, _ := w.step()
		for range 1 + rng.IntN(8) {
			rec.Apply(context.Background(), req)
		}
	}
	reqs, repeats := rec.reqs, 0
	for i := 1; i < len(reqs); i++ {
		if reqs[i] == reqs[i-1] && !rec.want[i-1].Allowed {
			repeats++
		}
	}
	for at := 0; at < len(reqs); {
		n := min(1+rng.IntN(100), len(reqs)-at)
		sizes := make([]int, n)
		for j := range sizes {
			sizes[j] = 1
		}
		got := multiCall(t, client, "repeats:", reqs[at:at+n], sizes)
		for j := range got {
			if i := at + j; got[j] != rec.want[i] {
				r := reqs[i]
				t.Fatalf("request %d (%s, %v, cost %d, %v), %d of a call of %d:\n got %+v\nwant %+v", i, r.Algorithm.Name(), r.Op, r.Cost, r.Limit, j, n, got[j], rec.want[i])
			}
		}
		at += n
	}
	t.Logf("%d requests, %d of them a repeat of a denial", len(reqs), repeats)
}
