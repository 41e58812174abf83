package sluice_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redisfaults"
	"github.com/sluicehq/sluice/stores/memstore"
)

// TestShapingMemstore runs the shaping scenario (redisfaults.CheckShaping,
// shared with the Redis stores' tests) on the memory store.
func TestShapingMemstore(t *testing.T) {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	for _, alg := range []core.Algorithm{algorithms.GCRA, algorithms.TokenBucket} {
		t.Run(alg.Name(), func(t *testing.T) { redisfaults.CheckShaping(t, store, alg) })
	}
}

func TestQueueBadInput(t *testing.T) {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	lim, _ := sluice.NewLimiter(store, algorithms.GCRA, core.PerSecond(5))
	for _, n := range []int64{0, -1, core.MaxUnits + 1} {
		if q, err := lim.WithQueue(n); !errors.Is(err, core.ErrInvalidRequest) || q != nil {
			t.Errorf("WithQueue(%d) = %v, %v; want ErrInvalidRequest", n, q, err)
		}
	}
	win, _ := sluice.NewLimiter(store, algorithms.FixedWindow, core.PerSecond(5))
	if _, err := win.WithQueue(3); !errors.Is(err, core.ErrUnsupported) {
		t.Errorf("WithQueue on a fixed window = %v; want ErrUnsupported", err)
	}
	st, _ := sluice.NewStack(store, sluice.Rule{Name: "a", Algorithm: algorithms.GCRA, Limit: core.PerSecond(5)})
	if _, err := st.WithQueue(0); !errors.Is(err, core.ErrInvalidRequest) {
		t.Errorf("Stack.WithQueue(0) = %v; want ErrInvalidRequest", err)
	}
	req := core.Request{Key: "k", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.GCRA, Limit: core.PerSecond(5), MaxQueue: 3}}
	if _, err := store.Apply(context.Background(), req); !errors.Is(err, core.ErrInvalidRequest) {
		t.Errorf("a charge with MaxQueue = %v; want ErrInvalidRequest", err)
	}
	req.Op, req.MaxWait, req.MaxQueue = core.OpReserve, time.Second, -1
	if _, err := store.Apply(context.Background(), req); !errors.Is(err, core.ErrInvalidRequest) {
		t.Errorf("a reservation with MaxQueue -1 = %v; want ErrInvalidRequest", err)
	}
	// Nothing was charged: the key still has its 5, 4 after a peek's 1.
	if d, err := lim.Peek(context.Background(), "k"); err != nil || d.Remaining != 4 {
		t.Errorf("Peek after bad requests = %+v, %v; want 4 remaining", d, err)
	}
}
