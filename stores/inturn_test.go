package stores_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores"
)

// valueKey is a context value the refunds must still carry.
type valueKey struct{}

// hanging is a store whose refunds hang until their context ends, and
// which answers every other request with allow[req.Key], or fails it
// with failing. It records each refund it is asked for.
type hanging struct {
	allow   map[string]bool
	failing string // a key whose charge fails

	mu      sync.Mutex
	refunds []refund
}

// refund is what hanging saw of one refund.
type refund struct {
	key      string
	value    any           // the valueKey the context carried
	deadline time.Duration // how far the context's deadline was, when it began
	op       core.Op
	maxWait  time.Duration
	maxQueue int64
}

// errStore is what a failing charge returns.
var errStore = errors.New("store failed")

func (h *hanging) apply(ctx context.Context, req core.Request) (core.Decision, error) {
	if req.Op != core.OpRefund {
		if req.Key == h.failing {
			return core.Decision{}, errStore
		}
		return core.Decision{Allowed: h.allow[req.Key]}, nil
	}
	dl, ok := ctx.Deadline()
	r := refund{key: req.Key, value: ctx.Value(valueKey{}), op: req.Op, maxWait: req.MaxWait, maxQueue: req.MaxQueue}
	if ok {
		r.deadline = time.Until(dl)
	}
	h.mu.Lock()
	h.refunds = append(h.refunds, r)
	h.mu.Unlock()
	<-ctx.Done() // a store that hangs: the context is all that ends it
	return core.Decision{}, ctx.Err()
}

// TestApplyInTurnBoundedRefunds runs ApplyInTurn on a store whose refunds
// hang: each call returns core.CleanupTimeout after its refunds began,
// even when the caller's context is already cancelled, and reports an
// undo it could not confirm wrapping core.ErrCleanup. The refunds carry
// the caller's context values.
func TestApplyInTurnBoundedRefunds(t *testing.T) {
	limit := core.PerSecond(10)
	req := func(key string, op core.Op) core.Request {
		r := core.Request{Key: key, Cost: 1, Op: op, Terms: &core.Terms{Algorithm: algorithms.GCRA, Limit: limit}}
		if op == core.OpReserve {
			r.MaxWait, r.MaxQueue = time.Second, 5
		}
		return r
	}
	for _, c := range []struct {
		name    string
		reqs    []core.Request
		allow   map[string]bool
		failing string
		refunds []string // the keys refunded, in order
		cleanup bool     // the error wraps core.ErrCleanup
		cause   error    // and this
	}{
		{
			name:    "denied charge undoes the earlier ones",
			reqs:    []core.Request{req("a", core.OpCharge), req("b", core.OpCharge), req("c", core.OpCharge)},
			allow:   map[string]bool{"a": true, "b": true},
			refunds: []string{"b", "a"}, cleanup: true,
		},
		{
			name:    "denied reservation undoes the earlier one",
			reqs:    []core.Request{req("a", core.OpReserve), req("b", core.OpReserve)},
			allow:   map[string]bool{"a": true},
			refunds: []string{"a"}, cleanup: true,
		},
		{
			name:    "failure part way undoes the earlier one",
			reqs:    []core.Request{req("a", core.OpCharge), req("b", core.OpCharge)},
			allow:   map[string]bool{"a": true},
			failing: "b",
			refunds: []string{"a"}, cleanup: true, cause: errStore,
		},
		{
			name:    "refunds asked for",
			reqs:    []core.Request{req("a", core.OpRefund), req("b", core.OpRefund)},
			refunds: []string{"a", "b"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := &hanging{allow: c.allow, failing: c.failing}
				ctx, cancel := context.WithCancel(context.WithValue(context.Background(), valueKey{}, "caller's"))
				cancel() // the caller has given up: the refunds are made all the same
				start := time.Now()
				err := stores.ApplyInTurn(ctx, stores.Func(h.apply), c.reqs, make([]core.Decision, len(c.reqs)))
				if took := time.Since(start); took != core.CleanupTimeout {
					t.Errorf("ApplyInTurn returned after %v; want core.CleanupTimeout, %v", took, core.CleanupTimeout)
				}
				if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, core.ErrCleanup) != c.cleanup {
					t.Errorf("ApplyInTurn = %v; want context.DeadlineExceeded, wrapped in core.ErrCleanup: %v", err, c.cleanup)
				}
				if c.cause != nil && !errors.Is(err, c.cause) {
					t.Errorf("ApplyInTurn = %v; want it to say why: %v", err, c.cause)
				}
				if len(h.refunds) != len(c.refunds) {
					t.Fatalf("refunds %+v; want of %q", h.refunds, c.refunds)
				}
				for i, r := range h.refunds {
					if r.key != c.refunds[i] || r.op != core.OpRefund || r.maxWait != 0 || r.maxQueue != 0 {
						t.Errorf("refund %d = %+v; want a plain refund of %q", i, r, c.refunds[i])
					}
					if r.value != "caller's" {
						t.Errorf("refund %d carried %v; want the caller's context values", i, r.value)
					}
					// The first refund has the whole timeout; the others
					// what the ones before them left (none: they hung).
					want := core.CleanupTimeout
					if i > 0 {
						want = 0
					}
					if r.deadline != want {
						t.Errorf("refund %d began %v before its deadline; want %v: one timeout for all of a call's refunds", i, r.deadline, want)
					}
				}
			})
		})
	}
}

// TestApplyInTurnUndoes checks that a batch denied part way gives back
// what it charged, and reports nothing more when the refunds land.
func TestApplyInTurnUndoes(t *testing.T) {
	var mu sync.Mutex
	var seen []core.Request
	store := stores.Func(func(ctx context.Context, req core.Request) (core.Decision, error) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, req)
		return core.Decision{Allowed: req.Key != "c" || req.Op == core.OpRefund}, nil
	})
	reqs := []core.Request{
		{Key: "a", Cost: 1, Op: core.OpReserve, Terms: &core.Terms{Algorithm: algorithms.GCRA, Limit: core.PerSecond(1), MaxWait: time.Second, MaxQueue: 3}},
		{Key: "b", Cost: 1, Op: core.OpReserve, Terms: &core.Terms{Algorithm: algorithms.GCRA, Limit: core.PerSecond(1), MaxWait: time.Second, MaxQueue: 3}},
		{Key: "c", Cost: 1, Op: core.OpReserve, Terms: &core.Terms{Algorithm: algorithms.GCRA, Limit: core.PerSecond(1), MaxWait: time.Second, MaxQueue: 3}},
	}
	out := make([]core.Decision, len(reqs))
	if err := store.ApplyAll(context.Background(), reqs, out); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		key string
		op  core.Op
	}{{"a", core.OpReserve}, {"b", core.OpReserve}, {"c", core.OpReserve}, {"b", core.OpRefund}, {"a", core.OpRefund}}
	if len(seen) != len(want) {
		t.Fatalf("the store saw %d requests; want %d", len(seen), len(want))
	}
	for i, w := range want {
		if r := seen[i]; r.Key != w.key || r.Op != w.op || (r.Op == core.OpRefund && (r.MaxWait != 0 || r.MaxQueue != 0)) {
			t.Errorf("request %d = %s %v (MaxWait %v, MaxQueue %d); want %s %v", i, r.Key, r.Op, r.MaxWait, r.MaxQueue, w.key, w.op)
		}
	}
	if out[2].Allowed {
		t.Errorf("out[2] = %+v; want the denial", out[2])
	}
}
