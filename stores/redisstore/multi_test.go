package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redisfaults"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/redisstore"
	"github.com/sluicehq/sluice/stores/rueidisstore"
)

// TestStackOneCall decides a three-rule stack through each Redis store on
// a server of its own: each decision, admitted or denied, is one script
// call, and a denied one leaves every rule as it was.
func TestStackOneCall(t *testing.T) {
	t.Parallel()
	srv, stores := serverAndStores(t, "one")
	for name, store := range stores {
		stack, err := sluice.NewStack(store,
			sluice.Rule{Name: "burst", Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(1).WithBurst(3)},
			sluice.Rule{Name: "daily", Algorithm: algorithms.SlidingWindowLog, Limit: core.PerDay(100)},
			sluice.Rule{Name: "tenant", Algorithm: algorithms.FixedWindow, Limit: core.Per(1000, time.Hour)},
		)
		if err != nil {
			t.Fatal(err)
		}
		calls := func() int64 {
			info := redisfaults.Info(t, srv, "commandstats")
			return redisfaults.InfoCount(info, "cmdstat_evalsha", "calls") + redisfaults.InfoCount(info, "cmdstat_eval", "calls")
		}
		ctx := context.Background()
		if _, err := stack.Allow(ctx, "warm", "warm", "warm"); err != nil { // loads the script
			t.Fatalf("%s: %v", name, err)
		}
		before := calls()
		var admitted int
		for range 5 {
			v, err := stack.Allow(ctx, "u1", "u1", "t1")
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if v.Allowed {
				admitted++
			}
		}
		if n := calls() - before; admitted != 3 || n != 5 {
			t.Errorf("%s: %d of 5 admitted in %d script calls; want 3 in 5", name, admitted, n)
		}
		v, err := stack.Allow(ctx, "u2", "u2", "t1")
		if err != nil || !v.Allowed || v.Rules()[1].Remaining != 99 || v.Rules()[2].Remaining != 1000-4 {
			t.Errorf("%s: another user after two denials: %+v, %v; want the tenant charged 4 times, not 6", name, v, err)
		}
	}
}

// TestStackClusterOneKey decides a burst limit and a daily quota on one
// user through a Cluster, in one script (the keys share the user's slot):
// denials charge neither rule.
func TestStackClusterOneKey(t *testing.T) {
	t.Parallel()
	cl := redistest.SharedCluster(t)
	gc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { gc.Close() })
	rs, err := redisstore.New(gc, redisstore.Config{Prefix: "stackcl:"})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: cl.Addrs(), DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	us, err := rueidisstore.New(rc, rueidisstore.Config{Prefix: "stackcl-u:"})
	if err != nil {
		t.Fatal(err)
	}
	for name, store := range map[string]core.Store{"redisstore": rs, "rueidisstore": us} {
		stack, err := sluice.NewStack(store,
			sluice.Rule{Name: "burst", Algorithm: algorithms.GCRA, Limit: core.PerSecond(1).WithBurst(2)},
			sluice.Rule{Name: "daily", Algorithm: algorithms.TokenBucket, Limit: core.PerDay(10)},
		)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		key := fmt.Sprintf("%s-user-%d", name, time.Now().UnixNano())
		var admitted int
		for range 6 {
			v, err := stack.Allow(ctx, key, key)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if v.Allowed {
				admitted++
			}
		}
		daily, err := store.Apply(ctx, core.Request{Key: key, Cost: 1, Op: core.OpPeek, Terms: &core.Terms{Algorithm: core.Named(algorithms.TokenBucket, "daily"), Limit: core.PerDay(10)}})
		if err != nil {
			t.Fatal(err)
		}
		if admitted != 2 || daily.Remaining != 10-3 {
			t.Errorf("%s: %d of 6 admitted, the daily quota left %d after a peek; want 2 admitted and 7 (only admissions charged)", name, admitted, daily.Remaining)
		}
	}
}

// TestBatchOfEachOpOneCall decides a batch of each operation through each
// Redis store on a server of its own: peeks, reservations, refunds, and
// charges of a concurrency rule beside a rate rule, each batch one script
// call whose decisions are what the rules' states say.
func TestBatchOfEachOpOneCall(t *testing.T) {
	t.Parallel()
	srv, stores := serverAndStores(t, "ops")
	calls := func() int64 {
		info := redisfaults.Info(t, srv, "commandstats")
		return redisfaults.InfoCount(info, "cmdstat_evalsha", "calls") + redisfaults.InfoCount(info, "cmdstat_eval", "calls")
	}
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	fast := core.Named(algorithms.TokenBucket, "fast")
	slow := core.Named(algorithms.TokenBucket, "slow")
	slots := core.Named(algorithms.Concurrency, "slots")
	for name, store := range stores {
		ctx := context.Background()
		req := func(alg core.Algorithm, limit core.Limit, op core.Op, cost int64, at time.Duration) core.Request {
			r := core.Request{Key: "u1", Cost: cost, Op: op, Terms: &core.Terms{Algorithm: alg, Limit: limit, Now: t0.Add(at)}}
			if op == core.OpReserve {
				r.MaxWait = time.Second
			}
			return r
		}
		fastL, slowL := core.PerSecond(10).WithBurst(1), core.PerSecond(2).WithBurst(1)
		ms := time.Millisecond
		// Load the script first.
		warm := []core.Request{req(fast, fastL, core.OpPeek, 1, 0), req(slow, slowL, core.OpPeek, 1, 0)}
		warm[0].Key, warm[1].Key = "warm", "warm"
		if err := store.ApplyAll(ctx, warm, make([]core.Decision, 2)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for i, tc := range []struct {
			what  string
			reqs  []core.Request
			check func(out []core.Decision) bool
		}{
			{"peeks of fresh keys", []core.Request{req(fast, fastL, core.OpPeek, 1, 0), req(slow, slowL, core.OpPeek, 1, 0)},
				func(out []core.Decision) bool { return out[0].Allowed && out[1].Allowed }},
			{"reservations", []core.Request{req(fast, fastL, core.OpReserve, 1, 0), req(slow, slowL, core.OpReserve, 1, 0)},
				func(out []core.Decision) bool {
					return out[0].Allowed && out[0].Delay == 0 && out[1].Allowed && out[1].Delay == 0
				}},
			{"reservations into debt", []core.Request{req(fast, fastL, core.OpReserve, 1, 0), req(slow, slowL, core.OpReserve, 1, 0)},
				func(out []core.Decision) bool { return out[0].Delay == 100*ms && out[1].Delay == 500*ms }},
			{"refunds", []core.Request{req(fast, fastL, core.OpRefund, 1, 0), req(slow, slowL, core.OpRefund, 1, 0)},
				func(out []core.Decision) bool { return out[0].Allowed && out[1].Allowed }},
			{"peeks after the refunds", []core.Request{req(fast, fastL, core.OpPeek, 1, 0), req(slow, slowL, core.OpPeek, 1, 0)},
				func(out []core.Decision) bool { return !out[0].Allowed && !out[1].Allowed }},
			{"a lease and a rate", []core.Request{
				{Key: "u1", Cost: 1, Lease: 7, Terms: &core.Terms{Algorithm: slots, Limit: core.Per(1, time.Minute), Now: t0}},
				req(fast, fastL, core.OpCharge, 1, time.Second)},
				func(out []core.Decision) bool { return out[0].Allowed && out[0].Remaining == 0 && out[1].Allowed }},
			{"another lease", []core.Request{
				{Key: "u1", Cost: 1, Lease: 8, Terms: &core.Terms{Algorithm: slots, Limit: core.Per(1, time.Minute), Now: t0}},
				req(fast, fastL, core.OpCharge, 1, 2*time.Second)},
				func(out []core.Decision) bool { return !out[0].Allowed && out[1].Allowed }},
		} {
			before := calls()
			out := make([]core.Decision, len(tc.reqs))
			if err := store.ApplyAll(ctx, tc.reqs, out); err != nil {
				t.Fatalf("%s: batch %d (%s): %v", name, i, tc.what, err)
			}
			if n := calls() - before; n != 1 {
				t.Errorf("%s: batch %d (%s) took %d script calls, want 1", name, i, tc.what, n)
			}
			if !tc.check(out) {
				t.Errorf("%s: batch %d (%s) = %+v", name, i, tc.what, out)
			}
		}
	}
}

// TestBatchAfterScriptFlush checks that a batch meeting NOSCRIPT (after a
// restart, a failover or SCRIPT FLUSH) falls back to EVAL once, as a
// single decision does, on each Redis store: the caller sees a decision,
// the server one NOSCRIPT and one EVAL per flush.
func TestBatchAfterScriptFlush(t *testing.T) {
	t.Parallel()
	srv, stores := serverAndStores(t, "flush")
	for name, store := range stores {
		stack, err := sluice.NewStack(store,
			sluice.Rule{Name: "user", Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(10)},
			sluice.Rule{Name: "all", Algorithm: algorithms.GCRA, Limit: core.PerSecond(100)},
		)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		for i := range 3 {
			if _, err := srv.Do("SCRIPT", "FLUSH"); err != nil {
				t.Fatal(err)
			}
			if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
				t.Fatal(err)
			}
			v, err := stack.Allow(ctx, "u", "all")
			if err != nil || !v.Allowed {
				t.Fatalf("%s, flush %d: a stack decision after SCRIPT FLUSH = %+v, %v; want admitted", name, i, v, err)
			}
			stats := redisfaults.Info(t, srv, "commandstats")
			eval := redisfaults.InfoCount(stats, "cmdstat_eval", "calls")
			noscript := redisfaults.InfoCount(redisfaults.Info(t, srv, "errorstats"), "errorstat_NOSCRIPT", "count")
			if eval != 1 || noscript != 1 {
				t.Errorf("%s, flush %d: the server counted %d EVAL and %d NOSCRIPT, want 1 each", name, i, eval, noscript)
			}
		}
	}
}

// serverAndStores starts a redis-server of the test's own and returns it
// with a store of each kind on it, by name: redisstore and rueidisstore,
// their keys under prefixes made from prefix.
func serverAndStores(t *testing.T, prefix string) (*redistest.Server, map[string]core.Store) {
	t.Helper()
	srv := redistest.Start(t)
	gc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { gc.Close() })
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	stores := make(map[string]core.Store)
	for name, cfg := range map[string]redisstore.Config{
		"redisstore": {Prefix: prefix + ":"},
	} {
		s, err := redisstore.New(gc, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores[name] = s
	}
	us, err := rueidisstore.New(rc, rueidisstore.Config{Prefix: prefix + "-u:"})
	if err != nil {
		t.Fatal(err)
	}
	stores["rueidisstore"] = us
	return srv, stores
}
