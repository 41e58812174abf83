package composetest_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/stores/memstore"
	"github.com/sluicehq/sluice/stores/storetest"
)

// TestSynctestChain runs the production chain over a memstore, behind a
// storetest.Faulty, inside a testing/synctest bubble: a stack's Wait
// through every decorator returns after exactly its delay on the bubble's
// clock, each decision is one ApplyAll at the backend, an outage is
// answered by the breaker's mode (fail-open), and closing the chain ends
// every goroutine, so that the bubble can end.
func TestSynctestChain(t *testing.T) {
	t.Parallel()
	began := time.Now()
	synctest.Test(t, func(t *testing.T) {
		mem, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		faulty := storetest.NewFaulty(mem)
		store, counter := chain(t, faulty)
		t.Cleanup(func() { store.Close() }) // closes every layer down to the memstore
		stack, err := sluice.NewStack(store,
			sluice.Rule{Name: "user", Algorithm: algorithms.GCRA, Limit: sluice.PerMinute(1)},
			sluice.Rule{Name: "global", Algorithm: algorithms.TokenBucket, Limit: sluice.PerHour(1)},
		)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if v, err := stack.Allow(ctx, "u", "all"); err != nil || !v.Allowed {
			t.Fatalf("Allow = %+v, %v", v, err)
		}
		start := time.Now()
		if v, err := stack.Wait(ctx, "u", "all"); err != nil || !v.Allowed {
			t.Fatalf("Wait = %+v, %v", v, err)
		}
		if took := time.Since(start); took != time.Hour {
			t.Errorf("Wait through the chain returned after %v, want the global rule's 1h", took)
		}
		if apply, all, _ := counter.Counts(); apply != 0 || all != 2 {
			t.Errorf("%d Apply and %d ApplyAll calls at the backend, want 0 and 2", apply, all)
		}

		faulty.Fail(storetest.ErrOutage)
		v, err := stack.Allow(ctx, "u", "all")
		if err != nil || !v.Allowed || v.Source != sluice.SourceFailOpen {
			t.Errorf("Allow during an outage = %+v, %v; want allowed fail-open", v, err)
		}
	})
	if real := time.Since(began); real > time.Minute {
		t.Errorf("an hour in the bubble took %v of real time", real)
	}
}
