package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
)

// This file checks batches ([core.Store.ApplyAll]) of every operation
// against the specification: each request decided by its algorithm's Go
// transition on a copy of its key's state, the copies kept only if every
// request was admitted. Each test runs twice: with every rule on one key
// (which a Redis Cluster store decides in one script call, the key's slot
// being one) and with a key for each rule (which it decides in turn).

// reference decides batches as the specification does. It holds states by
// key and algorithm name; the zero state is a key never charged.
type reference map[string]*core.State

// decide returns what a store must answer to reqs decided together at
// their explicit instants, and keeps the new states if every request was
// admitted.
func (ref reference) decide(reqs []core.Request) []core.Decision {
	want := make([]core.Decision, len(reqs))
	copies := make([]core.State, len(reqs))
	for i := range reqs {
		r := &reqs[i]
		if st := ref[r.Key+"\x00"+r.Algorithm.Name()]; st != nil {
			copies[i] = *st
			copies[i].Log = slices.Clone(st.Log)
		}
	}
	if core.RunAll(copies, reqs, 0, want) {
		for i := range reqs {
			st := copies[i]
			ref[reqs[i].Key+"\x00"+reqs[i].Algorithm.Name()] = &st
		}
	}
	return want
}

// batchRule is a rule of a batch test: an algorithm, a limit, and the key
// it is decided on.
type batchRule struct {
	alg   core.Algorithm
	limit core.Limit
	key   string
}

// layouts returns rules for each way a batch test lays out its keys:
// "OneKey", every rule on one key, and "KeyEach", a key for each rule.
// The algorithms are named after their rule, so that two rules of one
// algorithm keep apart.
func layouts(t *testing.T, algs []core.Algorithm, limits []core.Limit) map[string][]batchRule {
	one := newKey(t)
	m := map[string][]batchRule{"OneKey": nil, "KeyEach": nil}
	for i, alg := range algs {
		alg = core.Named(alg, fmt.Sprintf("r%d", i))
		m["OneKey"] = append(m["OneKey"], batchRule{alg, limits[i], one})
		m["KeyEach"] = append(m["KeyEach"], batchRule{alg, limits[i], fmt.Sprintf("%s:%d", newKey(t), i)})
	}
	return m
}

// batch returns the requests of rules (all of them, or those at the
// indexes which) with op and cost at instant at.
func batch(rules []batchRule, op core.Op, cost int64, at time.Time, which ...int) []core.Request {
	if which == nil {
		for i := range rules {
			which = append(which, i)
		}
	}
	reqs := make([]core.Request, 0, len(which))
	for _, i := range which {
		r := rules[i]
		reqs = append(reqs, core.Request{Key: r.key, Cost: cost, Op: op, Terms: &core.Terms{Algorithm: r.alg, Limit: r.limit, Now: at}})
	}
	return reqs
}

// applyBatch decides reqs on s with ApplyAll and wants the reference's
// decisions, whatever their Source (a cache may answer); it returns them.
// what names the call in failure messages.
func applyBatch(t *testing.T, s core.Store, ref reference, reqs []core.Request, what string) []core.Decision {
	t.Helper()
	got := make([]core.Decision, len(reqs))
	if err := s.ApplyAll(context.Background(), reqs, got); err != nil {
		t.Fatalf("%s: ApplyAll: %v", what, err)
	}
	want := ref.decide(reqs)
	for i := range reqs {
		if !sameDecision(got[i], want[i]) {
			t.Errorf("%s: request %d of %d (%s, %v, %v cost %d at T0+%v):\n got %+v\nwant %+v",
				what, i, len(reqs), reqs[i].Algorithm.Name(), reqs[i].Limit, reqs[i].Op, reqs[i].Cost, reqs[i].Now.Sub(T0), got[i], want[i])
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return got
}

// applyOne decides req on s with Apply and wants the reference's
// decision, which it returns.
func applyOne(t *testing.T, s core.Store, ref reference, req core.Request, what string) core.Decision {
	t.Helper()
	got, err := s.Apply(context.Background(), req)
	if err != nil {
		t.Fatalf("%s: Apply: %v", what, err)
	}
	want := ref.decide([]core.Request{req})[0]
	if !sameDecision(got, want) {
		t.Fatalf("%s: %s, %v, %v cost %d at T0+%v:\n got %+v\nwant %+v",
			what, req.Algorithm.Name(), req.Limit, req.Op, req.Cost, req.Now.Sub(T0), got, want)
	}
	return got
}

// allowed returns whether each decision was allowed.
func allowed(ds []core.Decision) []bool {
	a := make([]bool, len(ds))
	for i, d := range ds {
		a[i] = d.Allowed
	}
	return a
}

// testBatchDenied checks that a denied batch leaves a rule that would
// have admitted it exactly as it was, down to what only a refund reads: a
// sliding window counter charged in one window, then in a batch of the
// next that another rule denies, still gives a refund back to the first
// window. A store that charged the batch in turn and refunded it
// ([stores.ApplyInTurn]) would leave the key as if last charged in the
// second window, whose count the refund would take from instead.
func testBatchDenied(t *testing.T, s core.Store) {
	algs := []core.Algorithm{algorithms.SlidingWindowCounter, algorithms.TokenBucket}
	limits := []core.Limit{core.PerSecond(4), core.PerMinute(1)}
	ms := time.Millisecond
	for name, rules := range layouts(t, algs, limits) {
		t.Run(name, func(t *testing.T) {
			ref := make(reference)
			window, bucket := rules[0], rules[1]
			req := func(r batchRule, op core.Op, cost int64, at time.Duration) core.Request {
				return core.Request{Key: r.key, Cost: cost, Op: op, Terms: &core.Terms{Algorithm: r.alg, Limit: r.limit, Now: T0.Add(at)}}
			}
			applyOne(t, s, ref, req(window, core.OpCharge, 2, 0), "the window's charge of 2 at T0")
			applyOne(t, s, ref, req(bucket, core.OpCharge, 1, 0), "the bucket's charge of 1 at T0")
			got := applyBatch(t, s, ref, batch(rules, core.OpCharge, 1, T0.Add(1500*ms)), "charge of both at T0+1.5s")
			if !got[0].Allowed || got[1].Allowed {
				t.Fatalf("charge of both at T0+1.5s: allowed %v; want the window's admission and the bucket's denial", allowed(got))
			}
			applyOne(t, s, ref, req(window, core.OpRefund, 2, 1500*ms), "the window's refund of 2 at T0+1.5s")
			// The refund emptied the first window: 4 fit.
			if d := applyOne(t, s, ref, req(window, core.OpPeek, 4, 1500*ms), "the window's peek of 4 after the refund"); !d.Allowed {
				t.Fatalf("the window's peek of 4 after the refund = %+v, want allowed: the denied batch changed the window's state", d)
			}
		})
	}
}

// testBatchPeek checks that a batch of peeks, one of every algorithm,
// answers what each peek alone does, whether some rules would deny or
// all would admit, and changes nothing: later charges are decided as if
// there had been no peeks.
func testBatchPeek(t *testing.T, s core.Store) {
	algs := append(algorithms.All(), algorithms.Concurrency)
	limits := make([]core.Limit, len(algs))
	for i := range limits {
		limits[i] = core.PerMinute(5) // a unit every 12s: nothing comes back within the test
	}
	for name, rules := range layouts(t, algs, limits) {
		t.Run(name, func(t *testing.T) {
			ref := make(reference)
			// Leave each rule 4, 3, 2, 1, 0 and 1 of 5.
			for i, r := range rules {
				req := core.Request{Key: r.key, Cost: []int64{1, 2, 3, 4, 5, 4}[i], Terms: &core.Terms{Algorithm: r.alg, Limit: r.limit, Now: T0}}
				if d := applyOne(t, s, ref, req, fmt.Sprintf("charge of rule %d", i)); !d.Allowed {
					t.Fatalf("charge of rule %d at T0 = %+v, want allowed", i, d)
				}
			}
			ms := time.Millisecond
			// Rules 3 to 5 cannot take 2 more.
			got := applyBatch(t, s, ref, batch(rules, core.OpPeek, 2, T0.Add(100*ms)), "peek of every rule")
			if a := allowed(got); !slices.Equal(a, []bool{true, true, true, false, false, false}) {
				t.Fatalf("peek of every rule: allowed %v, want the first three", a)
			}
			for i, req := range batch(rules, core.OpPeek, 2, T0.Add(100*ms)) {
				applyOne(t, s, ref, req, fmt.Sprintf("rule %d peeked alone", i))
			}
			// Every rule admits: a batch that would be charged if it were not
			// a peek.
			got = applyBatch(t, s, ref, batch(rules, core.OpPeek, 2, T0.Add(200*ms), 0, 1, 2), "peek of the first three rules")
			if a := allowed(got); !slices.Equal(a, []bool{true, true, true}) {
				t.Fatalf("peek of the first three rules: allowed %v, want all", a)
			}
			applyBatch(t, s, ref, batch(rules, core.OpPeek, 0, T0.Add(300*ms)), "peek of cost 0")
			// Nothing was charged: each rule takes exactly what it had left.
			for i, left := range []int64{4, 3, 2, 1, 0, 1} {
				r := rules[i]
				req := core.Request{Key: r.key, Cost: left, Terms: &core.Terms{Algorithm: r.alg, Limit: r.limit, Now: T0.Add(400 * ms)}}
				if d := applyOne(t, s, ref, req, fmt.Sprintf("rule %d after the peeks", i)); !d.Allowed || d.Remaining != 0 {
					t.Fatalf("rule %d: charge of the %d left after the peeks = %+v, want allowed with 0 remaining: a peek charged", i, left, d)
				}
			}
		})
	}
}

// testBatchReserve checks batches of reservations under two token
// buckets, a fast and a slow one: a batch is admitted only if every rule
// admits it within MaxWait, each rule then owing what a reservation alone
// would (its Delay), and a batch any rule denies reserves nothing. A
// random trace of reservations, charges and refunds follows. A batch with
// a rule whose algorithm cannot reserve fails with core.ErrUnsupported.
func testBatchReserve(t *testing.T, s core.Store) {
	fast, slow := core.PerSecond(10).WithBurst(1), core.PerSecond(2).WithBurst(1) // a token every 100ms, 500ms
	for _, base := range []core.Algorithm{algorithms.TokenBucket, algorithms.GCRA} {
		testBatchReserveOf(t, s, base, fast, slow)
	}
	testBatchReserveUnsupported(t, s)
}

// testBatchReserveOf runs testBatchReserve's table and trace with both
// rules under alg.
func testBatchReserveOf(t *testing.T, s core.Store, alg core.Algorithm, fast, slow core.Limit) {
	ms := time.Millisecond
	algs := []core.Algorithm{alg, alg}
	for name, rules := range layouts(t, algs, []core.Limit{fast, slow}) {
		t.Run(alg.Name()+"/"+name, func(t *testing.T) {
			ref := make(reference)
			for i, st := range []struct {
				at      time.Duration
				cost    int64
				wait    time.Duration // MaxWait; 0 for a plain charge
				allowed bool
				delays  [2]time.Duration // each rule's Delay
			}{
				{0, 1, time.Second, true, [2]time.Duration{0, 0}},
				{0, 1, time.Second, true, [2]time.Duration{100 * ms, 500 * ms}},
				// The slow rule would need 1s: nothing is reserved, and the
				// fast rule reports the 200ms it would have owed.
				{0, 1, 800 * ms, false, [2]time.Duration{200 * ms, 0}},
				// Had the denied batch reserved, the fast rule would owe 300ms.
				{0, 1, time.Second, true, [2]time.Duration{200 * ms, time.Second}},
				{0, 1, 0, false, [2]time.Duration{}},
				{1500 * ms, 1, time.Second, true, [2]time.Duration{0, 0}},
				{1500 * ms, 2, time.Second, false, [2]time.Duration{}}, // cost 2 above a burst of 1: never
			} {
				op := core.OpCharge
				if st.wait > 0 {
					op = core.OpReserve
				}
				reqs := batch(rules, op, st.cost, T0.Add(st.at))
				for j := range reqs {
					reqs[j] = reqs[j].Clone()
					reqs[j].MaxWait = st.wait
				}
				what := fmt.Sprintf("step %d: %v of %d at T0+%v within %v", i, op, st.cost, st.at, st.wait)
				got := applyBatch(t, s, ref, reqs, what)
				all := got[0].Allowed && got[1].Allowed
				if all != st.allowed || got[0].Delay != st.delays[0] || got[1].Delay != st.delays[1] {
					t.Fatalf("%s: allowed %v, delays %v and %v; want %v, %v and %v",
						what, all, got[0].Delay, got[1].Delay, st.allowed, st.delays[0], st.delays[1])
				}
			}
			// A random trace: every batch of the two rules, against the
			// reference.
			rng, seed := newRand()
			now := T0.Add(2 * time.Second)
			admitted, denied := 0, 0
			n := traceLength / 10
			if testing.Short() {
				n /= 5
			}
			for i := range n {
				now = now.Add(time.Duration(rng.Int64N(int64(300*ms))) / us * us)
				op, wait := core.OpReserve, time.Duration(rng.Int64N(int64(2*time.Second))+1)/us*us+us
				switch rng.IntN(10) {
				case 0:
					op, wait = core.OpRefund, 0
				case 1:
					op, wait = core.OpCharge, 0
				case 2:
					op, wait = core.OpPeek, 0
				}
				cost := int64(1)
				if rng.IntN(10) == 0 {
					cost = 2 // above the burst: never
				}
				reqs := batch(rules, op, cost, now)
				for j := range reqs {
					reqs[j] = reqs[j].Clone()
					reqs[j].MaxWait = wait
				}
				got := applyBatch(t, s, ref, reqs, fmt.Sprintf("seed %d, batch %d (%v within %v)", seed, i, op, wait))
				if op == core.OpReserve {
					if got[0].Allowed && got[1].Allowed {
						admitted++
					} else {
						denied++
					}
				}
			}
			if admitted < n/20 || denied < n/20 {
				t.Fatalf("seed %d: %d reservations admitted and %d denied of %d batches: too few of one to prove much", seed, admitted, denied, n)
			}
		})
	}

}

// testBatchReserveUnsupported: an algorithm that cannot reserve fails the
// batch before anything is charged.
func testBatchReserveUnsupported(t *testing.T, s core.Store) {
	key := newKey(t)
	bucket := core.Request{Key: key, Cost: 1, Op: core.OpReserve, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerMinute(1), Now: T0, MaxWait: time.Second}}
	window := bucket.Clone()
	window.Algorithm = algorithms.FixedWindow
	if err := s.ApplyAll(context.Background(), []core.Request{bucket, window}, make([]core.Decision, 2)); !errors.Is(err, core.ErrUnsupported) {
		t.Errorf("a batch reserving under the fixed window: err = %v, want %v", err, core.ErrUnsupported)
	}
	bucket = bucket.As(core.OpCharge)
	if d, err := s.Apply(context.Background(), bucket); err != nil || !d.Allowed {
		t.Errorf("charge after the refused batch = %+v, %v; want allowed: the refused batch charged", d, err)
	}
}

// testBatchRefund checks batches of refunds, one rule of every algorithm:
// a refund is always admitted, a batch of them gives every rule its cost
// back, a charged batch refunded at its instant is undone exactly, and a
// refund of a key never charged leaves it as it was.
func testBatchRefund(t *testing.T, s core.Store) {
	algs := append(algorithms.All(), algorithms.Concurrency)
	limits := make([]core.Limit, len(algs))
	for i := range limits {
		limits[i] = core.PerMinute(5)
	}
	ms := time.Millisecond
	for name, rules := range layouts(t, algs, limits) {
		t.Run(name, func(t *testing.T) {
			ref := make(reference)
			all := func(what string, ds []core.Decision) {
				t.Helper()
				for i, d := range ds {
					if !d.Allowed {
						t.Fatalf("%s: rule %d = %+v, want allowed", what, i, d)
					}
				}
			}
			// A refund of keys never charged leaves them full.
			all("refund of fresh keys", applyBatch(t, s, ref, batch(rules, core.OpRefund, 2, T0), "refund of fresh keys"))
			all("charge of 3", applyBatch(t, s, ref, batch(rules, core.OpCharge, 3, T0), "charge of 3"))
			all("refund of 3", applyBatch(t, s, ref, batch(rules, core.OpRefund, 3, T0), "refund of 3"))
			// Without the refund 2 would be left, not 5.
			all("charge of 5 after the refund", applyBatch(t, s, ref, batch(rules, core.OpCharge, 5, T0.Add(100*ms)), "charge of 5 after the refund"))
			got := applyBatch(t, s, ref, batch(rules, core.OpCharge, 1, T0.Add(200*ms)), "charge with nothing left")
			if a := allowed(got); slices.Contains(a, true) {
				t.Fatalf("charge with nothing left: allowed %v, want none", a)
			}
			// Refunds are made whatever the state of the others: the first
			// rule's key is given back two, the others one.
			all("refund of 2", applyBatch(t, s, ref, batch(rules, core.OpRefund, 2, T0.Add(200*ms), 0), "refund of 2 to one rule"))
			all("refund of 1", applyBatch(t, s, ref, batch(rules, core.OpRefund, 1, T0.Add(200*ms)), "refund of 1"))
			got = applyBatch(t, s, ref, batch(rules, core.OpPeek, 2, T0.Add(300*ms)), "peek of 2 after the refunds")
			if a := allowed(got); !slices.Equal(a, []bool{true, false, false, false, false, false}) {
				t.Fatalf("peek of 2 after the refunds: allowed %v, want the first rule's only", a)
			}
		})
	}
}

// testBatchLeases checks batches of a concurrency rule, whose leases are
// acquired, renewed and released, and a rate rule: a batch the
// concurrency rule denies charges the rate rule nothing, a renewal takes
// no second slot, and a release frees the lease's slot.
func testBatchLeases(t *testing.T, s core.Store) {
	algs := []core.Algorithm{algorithms.Concurrency, algorithms.TokenBucket}
	slots := core.Per(2, 10*time.Second)            // 2 in flight, leases live 10s
	rate := core.Per(10, time.Minute).WithBurst(10) // a token every 6s
	sec := time.Second
	for name, rules := range layouts(t, algs, []core.Limit{slots, rate}) {
		t.Run(name, func(t *testing.T) {
			ref := make(reference)
			for i, st := range []struct {
				at      time.Duration
				lease   int64
				cost    int64
				release bool
				allowed bool
				left    [2]int64 // each rule's Remaining
			}{
				{0, 1, 1, false, true, [2]int64{1, 9}},
				{sec, 1, 1, false, true, [2]int64{1, 8}}, // a renewal: still one slot
				{2 * sec, 2, 1, false, true, [2]int64{0, 7}},
				{3 * sec, 3, 1, false, false, [2]int64{0, 6}}, // no slot: the rate rule is not charged
				{3 * sec, 1, 1, true, true, [2]int64{1, 8}},   // release lease 1, and refund its rate
				{4 * sec, 3, 1, false, true, [2]int64{0, 7}},  // its slot is free
				{12 * sec, 4, 1, false, true, [2]int64{0, 8}}, // lease 2 expired at 12s
				{13 * sec, 5, 2, false, false, [2]int64{0, 7}},
				{14 * sec, 5, 2, false, false, [2]int64{1, 7}}, // lease 3 expired; lease 4 holds one until 22s
				{22 * sec, 5, 2, false, true, [2]int64{0, 8}},
				{22 * sec, 6, 3, false, false, [2]int64{0, 7}}, // 3 of 2 slots: never
				{23 * sec, 0, 1, false, false, [2]int64{0, 7}}, // an anonymous slot: none free
				{23 * sec, 5, 2, true, true, [2]int64{2, 9}},   // release lease 5
			} {
				op := core.OpCharge
				if st.release {
					op = core.OpRefund
				}
				reqs := batch(rules, op, st.cost, T0.Add(st.at))
				reqs[0].Lease = st.lease
				reqs[1].Cost = 1
				what := fmt.Sprintf("step %d: %v lease %d cost %d at T0+%v", i, op, st.lease, st.cost, st.at)
				got := applyBatch(t, s, ref, reqs, what)
				all := got[0].Allowed && got[1].Allowed
				if all != st.allowed || got[0].Remaining != st.left[0] || got[1].Remaining != st.left[1] {
					t.Errorf("%s: allowed %v, remaining %d and %d; want %v, %d and %d",
						what, all, got[0].Remaining, got[1].Remaining, st.allowed, st.left[0], st.left[1])
				}
			}
		})
	}
}

// testBatchBadInput checks that ApplyAll rejects what stores.ValidateAll
// rejects, with the sentinel it names, and charges nothing.
func testBatchBadInput(t *testing.T, s core.Store) {
	ctx := context.Background()
	key := newKey(t)
	a := core.Request{Key: key, Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerMinute(1), Now: T0}}
	b := a.Clone()
	b.Algorithm = algorithms.GCRA
	for _, tc := range []struct {
		name string
		reqs []core.Request
		out  int
		want error
	}{
		{"no requests", nil, 0, core.ErrInvalidRequest},
		{"short out", []core.Request{a, b}, 1, core.ErrInvalidRequest},
		{"long out", []core.Request{a, b}, 3, core.ErrInvalidRequest},
		{"two operations", []core.Request{a, func() core.Request { r := b; r.Op = core.OpPeek; return r }()}, 2, core.ErrInvalidRequest},
		{"one key and algorithm twice", []core.Request{a, a}, 2, core.ErrInvalidRequest},
		{"an empty key", []core.Request{a, func() core.Request { r := b; r.Key = ""; return r }()}, 2, core.ErrInvalidKey},
		{"no terms", []core.Request{a, func() core.Request { r := b; r.Terms = nil; return r }()}, 2, core.ErrNoAlgorithm},
		{"a negative cost", []core.Request{a, func() core.Request { r := b; r.Cost = -1; return r }()}, 2, core.ErrInvalidCost},
		{"MaxWait on a charge", []core.Request{a, func() core.Request { r := b.Clone(); r.MaxWait = time.Second; return r }()}, 2, core.ErrInvalidRequest},
	} {
		out := make([]core.Decision, tc.out)
		if err := s.ApplyAll(ctx, tc.reqs, out); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
		for i, d := range out {
			if d != (core.Decision{}) {
				t.Errorf("%s: decision %d = %+v with an error, want the zero Decision", tc.name, i, d)
			}
		}
	}
	for _, r := range []core.Request{a, b} {
		if d, err := s.Apply(ctx, r); err != nil || !d.Allowed {
			t.Fatalf("%s after the bad batches = %+v, %v; want allowed: a bad batch charged", r.Algorithm.Name(), d, err)
		}
	}
}

// capacityOf returns the most cost alg admits at once under l: the burst
// of the bucket algorithms, the rate of the others.
func capacityOf(alg core.Algorithm, l core.Limit) int64 {
	name := alg.Name()
	if strings.HasPrefix(name, "fixed-window") || strings.HasPrefix(name, "sliding") || strings.HasPrefix(name, "concurrency") {
		return l.Rate()
	}
	return l.Burst()
}
