package composetest_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/internal/redisfaults"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/storetest"
)

// decisions is how many decisions the counting tests make.
const decisions = 100

// threeRules returns a stack over store of a per-user, a per-tenant and a
// global rule, every one of them roomy enough to admit the counting
// tests' decisions: a denial would be cached by the layered store and
// answered with no round trip, which is right, but not what is counted.
func threeRules(t testing.TB, store sluice.Store) *sluice.Stack {
	t.Helper()
	stack, err := sluice.NewStack(store,
		sluice.Rule{Name: "user", Algorithm: algorithms.TokenBucket, Limit: sluice.PerSecond(100).WithBurst(decisions)},
		sluice.Rule{Name: "tenant", Algorithm: algorithms.GCRA, Limit: sluice.PerSecond(1000).WithBurst(decisions)},
		sluice.Rule{Name: "global", Algorithm: algorithms.SlidingWindowCounter, Limit: sluice.PerMinute(10 * decisions)},
	)
	if err != nil {
		t.Fatal(err)
	}
	return stack
}

// keysOf returns the keys of decision i: one of 10 users, one of 3
// tenants, and the global key.
func keysOf(i int) []string {
	return []string{fmt.Sprintf("user:%d", i%10), fmt.Sprintf("tenant:%d", i%3), "global"}
}

// decide makes the counting tests' decisions on stack, and fails t unless
// each is admitted.
func decide(t *testing.T, stack *sluice.Stack) {
	t.Helper()
	for i := range decisions {
		v, err := stack.Allow(context.Background(), keysOf(i)...)
		if err != nil {
			t.Fatalf("decision %d: %v", i, err)
		}
		if !v.Allowed {
			t.Fatalf("decision %d = %+v, want allowed", i, v)
		}
	}
}

// checkCounts fails t unless the Counter saw exactly one ApplyAll per
// decision since it read before (its Counts then), and no Apply.
func checkCounts(t *testing.T, counter *storetest.Counter, before [3]int64) {
	t.Helper()
	apply, all, reset := counter.Counts()
	apply, all, reset = apply-before[0], all-before[1], reset-before[2]
	t.Logf("%d decisions of 3 rules: the backend saw %d ApplyAll, %d Apply, %d Reset", decisions, all, apply, reset)
	if all != decisions || apply != 0 || reset != 0 {
		t.Errorf("the backend saw %d ApplyAll, %d Apply and %d Reset for %d decisions; want %d ApplyAll and nothing else: a layer of the chain does not pass a batch on as one call",
			all, apply, reset, decisions, decisions)
	}
}

func counts(c *storetest.Counter) [3]int64 {
	apply, all, reset := c.Counts()
	return [3]int64{apply, all, reset}
}

// TestStackOneCallMemstore makes decisions of a three-rule stack through
// the chain over memstore: each reaches the backend as one ApplyAll.
func TestStackOneCallMemstore(t *testing.T) {
	t.Parallel()
	store, counter := chain(t, newMemstore(t))
	defer store.Close()
	decide(t, threeRules(t, store))
	checkCounts(t, counter, [3]int64{})
}

// TestStackOneScript makes decisions of a three-rule stack through the
// chain over each Redis store, on a server of the test's own (its
// statistics are reset): each reaches the backend as one ApplyAll, and
// the server as one EVALSHA.
func TestStackOneScript(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for name, open := range map[string]func(t testing.TB) sluice.Store{
		"redisstore":   onGoRedis(newGoRedis(t, srv.Addr())),
		"rueidisstore": onRueidis(newRueidis(t, srv.Addr())),
	} {
		t.Run(name, func(t *testing.T) { // not parallel: they share the server's statistics
			store, counter := chain(t, open(t))
			defer store.Close()
			stack := threeRules(t, store)
			// Load the script and open a connection first; from here on
			// every script call is a decision's.
			if _, err := stack.Peek(context.Background(), keysOf(0)...); err != nil {
				t.Fatal(err)
			}
			if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
				t.Fatal(err)
			}
			before := counts(counter)
			decide(t, stack)
			checkCounts(t, counter, before)
			stats := redisfaults.Info(t, srv, "commandstats")
			evalsha := redisfaults.InfoCount(stats, "cmdstat_evalsha", "calls")
			eval := redisfaults.InfoCount(stats, "cmdstat_eval", "calls")
			t.Logf("the server ran %d EVALSHA and %d EVAL", evalsha, eval)
			if evalsha != decisions || eval != 0 {
				t.Errorf("the server ran %d EVALSHA and %d EVAL for %d decisions of 3 rules; want one EVALSHA per decision", evalsha, eval, decisions)
			}
		})
	}
}
