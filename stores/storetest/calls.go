package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
)

// This file checks a batch of callers' calls ([core.Batcher]): each call
// decided as Apply or ApplyAll would decide it alone, in the order of the
// batch, one call's denial charging nothing of another's, and one call's
// error no other's.

// testCalls decides a batch of calls of every kind: single requests and
// groups on shared keys, a group that one of its rules denies, an invalid
// call, a group with a request under core.Inf, and a hot key many calls
// charge. The calls of a batch are concurrent callers', decided in any
// order, so the test checks what every order gives: the same decisions
// where the order cannot change them, the same number admitted on each
// key, and each key's state at the end, which a peek of each rule
// compares with the specification's.
func testCalls(t *testing.T, s core.Store) {
	b, ok := s.(core.Batcher)
	if !ok {
		t.Skip("the store is not a core.Batcher")
	}
	tb := algorithms.TokenBucket
	two, one := core.PerMinute(2), core.PerMinute(1)
	shared, hot, grouped, unlimited := newKey(t), newKey(t), newKey(t), newKey(t)
	rule := func(key string, alg core.Algorithm, limit core.Limit, cost int64) core.Request {
		return core.Request{Key: key, Cost: cost, Terms: &core.Terms{Algorithm: alg, Limit: limit, Now: T0}}
	}
	burst, daily := core.Named(tb, "burst"), core.Named(tb, "daily")
	var calls []*core.Call
	add := func(reqs ...core.Request) *core.Call {
		c := &core.Call{Ctx: context.Background(), Reqs: reqs, Out: make([]core.Decision, len(reqs))}
		calls = append(calls, c)
		return c
	}
	var sharedCalls, hotCalls []*core.Call
	for range 3 {
		sharedCalls = append(sharedCalls, add(rule(shared, tb, two, 1)))
	}
	// Denied in any order: daily's cost is above its capacity.
	denied := add(rule(grouped, burst, two, 1), rule(grouped, daily, one, 2))
	// Admitted in any order: the denied group charges nothing.
	whole := add(rule(grouped, burst, two, 2))
	invalid := add(rule(shared, tb, two, -1))
	twice := add(rule(hot, tb, two, 1), rule(hot, tb, two, 1))
	withInf := add(rule(unlimited, tb, core.Inf, 1), rule(grouped, daily, one, 1))
	for range 5 {
		hotCalls = append(hotCalls, add(rule(hot, tb, two, 1)))
	}
	b.ApplyBatch(context.Background(), calls)

	for _, c := range []struct {
		call *core.Call
		want error
	}{{invalid, core.ErrInvalidCost}, {twice, core.ErrInvalidRequest}} {
		if !errors.Is(c.call.Err, c.want) {
			t.Errorf("a call of %v: Err = %v, want %v", c.call.Reqs, c.call.Err, c.want)
		}
	}
	for i, c := range calls {
		if c != invalid && c != twice && c.Err != nil {
			t.Errorf("call %d: Err = %v", i, c.Err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	admitted := func(cs []*core.Call) int {
		n := 0
		for _, c := range cs {
			if c.Out[0].Allowed {
				n++
			}
		}
		return n
	}
	if n := admitted(sharedCalls); n != 2 {
		t.Errorf("%d of 3 calls admitted on a key of burst 2, want 2", n)
	}
	if n := admitted(hotCalls); n != 2 {
		t.Errorf("%d of 5 calls admitted on a key of burst 2, want 2", n)
	}
	if denied.Out[0].Allowed && denied.Out[1].Allowed {
		t.Errorf("a group of a rule whose cost is above its capacity was admitted: %+v", denied.Out)
	}
	if d := denied.Out[1]; d.Allowed || d.RetryAfter != core.RetryNever {
		t.Errorf("the rule whose cost is above its capacity: %+v, want a denial that never passes", d)
	}
	ref := reference{}
	if want := ref.decide(whole.Reqs); !sameDecision(whole.Out[0], want[0]) {
		t.Errorf("a charge after a denied group:\n got %+v\nwant %+v (the group charged something)", whole.Out[0], want[0])
	}
	if want := ref.decide(withInf.Reqs); !sameDecision(withInf.Out[1], want[1]) || !withInf.Out[0].Allowed {
		t.Errorf("a group with a request under core.Inf:\n got %+v\nwant %+v", withInf.Out, want)
	}
	// Each key's state is what the admitted calls left, in any order.
	ref.decide([]core.Request{rule(shared, tb, two, 2)})
	ref.decide([]core.Request{rule(hot, tb, two, 2)})
	for _, r := range []core.Request{rule(shared, tb, two, 1), rule(grouped, burst, two, 1), rule(grouped, daily, one, 1), rule(hot, tb, two, 1)} {
		r.Op = core.OpPeek
		applyOne(t, s, ref, r, "a peek after the batch")
	}
}

// testCallsConcurrent has goroutines decide batches of calls on one key
// at once, each call a charge of 1 at one instant: the key admits exactly
// its capacity, whatever the batches' order, and every call is answered.
func testCallsConcurrent(t *testing.T, s core.Store) {
	b, ok := s.(core.Batcher)
	if !ok {
		t.Skip("the store is not a core.Batcher")
	}
	const goroutines, batches, size, capacity = 4, 3, 10, 50
	key := newKey(t)
	limit := core.PerHour(capacity)
	now := T0.Add(time.Minute)
	var mu sync.Mutex
	admitted := 0
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range batches {
				calls := make([]*core.Call, size)
				for i := range calls {
					calls[i] = &core.Call{
						Ctx:  context.Background(),
						Reqs: []core.Request{{Key: key, Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: limit, Now: now}}},
						Out:  make([]core.Decision, 1),
					}
				}
				b.ApplyBatch(context.Background(), calls)
				for _, c := range calls {
					if c.Err != nil {
						t.Errorf("a call failed: %v", c.Err)
						return
					}
					if c.Out[0].Allowed {
						mu.Lock()
						admitted++
						mu.Unlock()
					}
				}
			}
		})
	}
	wg.Wait()
	if want := min(capacity, goroutines*batches*size); admitted != want {
		t.Errorf("%d admitted of %d calls on a key of capacity %d, want %d", admitted, goroutines*batches*size, capacity, want)
	}
}
