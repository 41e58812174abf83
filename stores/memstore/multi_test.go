package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores/memstore"
)

// TestBatchesKeepOnlyCharges checks which batches add keys to the store:
// only admitted charges and reservations of a positive cost. Peeks,
// refunds, zero costs and denied batches of keys it does not hold leave
// it holding none of them, as Apply does; a refund of a key it holds
// changes that key.
func TestBatchesKeepOnlyCharges(t *testing.T) {
	t.Parallel()
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	a := core.Named(algorithms.TokenBucket, "a")
	b := core.Named(algorithms.TokenBucket, "b")
	limit := core.PerMinute(2)
	pair := func(key string, op core.Op, cost int64) []core.Request {
		reqs := []core.Request{
			{Key: key, Cost: cost, Op: op, Terms: &core.Terms{Algorithm: a, Limit: limit, Now: t0}},
			{Key: key, Cost: cost, Op: op, Terms: &core.Terms{Algorithm: b, Limit: limit, Now: t0}},
		}
		if op == core.OpReserve {
			reqs[0].MaxWait, reqs[1].MaxWait = time.Minute, time.Minute
		}
		return reqs
	}
	// Exhaust "full" under b alone: a batch with it is denied.
	if d, err := s.Apply(ctx, core.Request{Key: "full", Cost: 2, Terms: &core.Terms{Algorithm: b, Limit: limit, Now: t0}}); err != nil || !d.Allowed {
		t.Fatalf("charge of full = %+v, %v; want allowed", d, err)
	}
	deniedMix := []core.Request{
		{Key: "fresh", Cost: 1, Terms: &core.Terms{Algorithm: a, Limit: limit, Now: t0}},
		{Key: "full", Cost: 1, Terms: &core.Terms{Algorithm: b, Limit: limit, Now: t0}},
	}
	for i, st := range []struct {
		what    string
		reqs    []core.Request
		allowed bool
		keys    int // the store's keys afterwards
	}{
		{"peeks", pair("k1", core.OpPeek, 1), true, 1},
		{"refunds", pair("k1", core.OpRefund, 1), true, 1},
		{"charges of 0", pair("k1", core.OpCharge, 0), true, 1},
		{"a denied batch", deniedMix, false, 1},
		{"charges", pair("k1", core.OpCharge, 1), true, 3},
		{"reservations", pair("k2", core.OpReserve, 1), true, 5},
		{"refunds of held keys", pair("k1", core.OpRefund, 1), true, 5},
	} {
		out := make([]core.Decision, len(st.reqs))
		if err := s.ApplyAll(ctx, st.reqs, out); err != nil {
			t.Fatalf("step %d (%s): %v", i, st.what, err)
		}
		if all := out[0].Allowed && out[1].Allowed; all != st.allowed {
			t.Errorf("step %d (%s): allowed %v, want %v: %+v", i, st.what, all, st.allowed, out)
		}
		if n := s.Stats().Keys; n != st.keys {
			t.Errorf("step %d (%s): the store holds %d keys, want %d", i, st.what, n, st.keys)
		}
	}
	// The refund gave k1 its unit back under both rules.
	out := make([]core.Decision, 2)
	if err := s.ApplyAll(ctx, pair("k1", core.OpPeek, 2), out); err != nil || !out[0].Allowed || !out[1].Allowed {
		t.Errorf("peek of 2 after the refund = %+v, %v; want both allowed", out, err)
	}
}
