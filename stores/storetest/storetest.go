package storetest

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
)

// T0 is the instant the suite's step tables start at. It falls on a whole
// day, so every window boundary the tables rely on falls on a whole second.
var T0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// Run runs the conformance suite against stores made by newStore, each in
// its own parallel subtest. newStore is called once per subtest and must
// return a new store, though stores may share a backend (one Redis
// server): the suite never uses a key another subtest uses. The suite
// closes each store when its subtest ends; the Close test checks that a
// second Close is harmless and that every method fails with
// [core.ErrClosed] after the first.
//
// The suite decides at explicit instants ([core.Terms.Now]) wherever it
// checks exact numbers, so it suits stores whose own clock is elsewhere,
// such as a Redis server. It assumes only that a store keeps a key's state
// for at least the algorithm's horizon after its last charge, measured on
// the store's own clock; its limits have horizons of a second or more.
//
// A store whose ApplyAll decides some batches in turn ([stores.ApplyInTurn]),
// such as a Redis Cluster store for keys in different slots, passes
// [InTurn]: concurrent batches may then be denied while another batch's
// refunds are in flight, and the suite checks only that none over-admits.
// Every other store must admit concurrent batches exactly.
func Run(t *testing.T, newStore func(t *testing.T) core.Store, opts ...Option) {
	t.Helper()
	var cfg config
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	open := func(t *testing.T) core.Store {
		t.Helper()
		s := newStore(t)
		if s == nil {
			t.Fatal("newStore returned nil")
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	for _, alg := range algorithms.All() {
		for _, tc := range []struct {
			name string
			test func(*testing.T, core.Store, core.Algorithm)
		}{
			{"Steps", testSteps},
			{"Trace", testTrace},
			{"ConcurrentSafe", testConcurrentSafe},
			{"Peek", testPeek},
			{"Unsatisfiable", testUnsatisfiable},
			{"OwnClock", testOwnClock},
			{"Refund", testRefund},
			{"Instants", testInstants},
			{"FutureState", testFutureState},
			{"SkewedClocks", testSkewedClocks},
		} {
			t.Run(tc.name+"/"+alg.Name(), func(t *testing.T) {
				t.Parallel()
				tc.test(t, open(t), alg)
			})
		}
	}
	for _, tc := range []struct {
		name string
		test func(*testing.T, core.Store)
	}{
		{"Keys", testKeys},
		{"BadInput", testBadInput},
		{"Inf", testInf},
		{"InstantsCommon", testInstantsCommon},
		{"Reserve", testReserve},
		{"Multi", func(t *testing.T, s core.Store) { testMulti(t, s, !cfg.inTurn) }},
		{"MultiConcurrentSafe", func(t *testing.T, s core.Store) { testMultiConcurrentSafe(t, s, !cfg.inTurn) }},
		{"BatchDenied", func(t *testing.T, s core.Store) {
			if cfg.inTurn {
				t.Skip("the store decides some batches in turn (storetest.InTurn)")
			}
			testBatchDenied(t, s)
		}},
		{"BatchPeek", testBatchPeek},
		{"BatchReserve", testBatchReserve},
		{"BatchRefund", testBatchRefund},
		{"BatchAtMost", testBatchAtMost},
		{"BatchLeases", testBatchLeases},
		{"BatchBadInput", testBatchBadInput},
		{"Leases", testLeases},
		{"LeasesConcurrentSafe", testLeasesConcurrentSafe},
		{"Reset", testReset},
		{"Close", testClose},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.test(t, open(t))
		})
	}
}

// newKey returns a key no other test uses, so that tests may share a store.
func newKey(t *testing.T) string {
	var b [8]byte
	rand.Read(b[:])
	return "storetest:" + hex.EncodeToString(b[:]) + ":" + t.Name()
}

// step is one call in a step table: cost at T0+at, and what it must get.
type step struct {
	at        time.Duration
	cost      int64
	allowed   bool
	remaining int64
	retry     time.Duration // RetryAfter
}

const us = time.Microsecond

// steps are the suite's step tables, at fixed instants from T0.
var steps = map[string]struct {
	limit core.Limit
	steps []step
}{
	"token-bucket": {core.PerSecond(10).WithBurst(5), bucketSteps},
	"gcra":         {core.PerSecond(10).WithBurst(5), bucketSteps},
	"fixed-window": {core.PerSecond(3), []step{
		{0, 1, true, 2, 0},
		{0, 2, true, 0, 0},
		{500 * time.Millisecond, 1, false, 0, 500 * time.Millisecond},
		{time.Second - us, 1, false, 0, us},
		{time.Second, 3, true, 0, 0}, // a new window: 6 within a microsecond
		{1500 * time.Millisecond, 4, false, 0, core.RetryNever},
		{1500 * time.Millisecond, 0, true, 0, 0},
		{2 * time.Second, 2, true, 1, 0},
	}},
	"sliding-window-counter": {core.PerSecond(4), []step{
		{0, 4, true, 0, 0},
		{0, 1, false, 0, 1250 * time.Millisecond},
		// At 1.25s the previous window's 4 weigh 4 × 0.75 = 3.
		{1250*time.Millisecond - us, 1, false, 0, us},
		{1250 * time.Millisecond, 1, true, 0, 0},
		// At 1.5s they weigh 2: room for one more.
		{1500 * time.Millisecond, 1, true, 0, 0},
		{1500 * time.Millisecond, 1, false, 0, 250 * time.Millisecond},
		{1750 * time.Millisecond, 1, true, 0, 0},
		{3 * time.Second, 3, true, 1, 0},
	}},
	"sliding-window-log": {core.PerSecond(3), []step{
		{0, 1, true, 2, 0},
		{100 * time.Millisecond, 1, true, 1, 0},
		{200 * time.Millisecond, 1, true, 0, 0},
		{300 * time.Millisecond, 1, false, 0, 700 * time.Millisecond},
		{999999 * us, 2, false, 0, 100*time.Millisecond + us},
		// The charge at 0 leaves the window (t−1s, t] at t = 1s.
		{time.Second, 1, true, 0, 0},
		{time.Second, 1, false, 0, 100 * time.Millisecond},
		{1100 * time.Millisecond, 1, true, 0, 0},
		{3 * time.Second, 3, true, 0, 0},
	}},
}

// bucketSteps hold for the token bucket and GCRA alike: a token every
// 100ms, at most 5 at once.
var bucketSteps = []step{
	{0, 1, true, 4, 0},
	{0, 4, true, 0, 0},
	{0, 1, false, 0, 100 * time.Millisecond},
	{100*time.Millisecond - us, 1, false, 0, us},
	{100 * time.Millisecond, 1, true, 0, 0},
	{150 * time.Millisecond, 2, false, 0, 150 * time.Millisecond},
	{300 * time.Millisecond, 2, true, 0, 0},
	{300 * time.Millisecond, 6, false, 0, core.RetryNever},
	{300 * time.Millisecond, 0, true, 0, 0},
	{10 * time.Second, 5, true, 0, 0},
	// A clock that runs backwards is read as the latest charge's.
	{time.Second, 1, false, 0, 100 * time.Millisecond},
}

func testSteps(t *testing.T, s core.Store, alg core.Algorithm) {
	table, ok := steps[alg.Name()]
	if !ok {
		t.Fatalf("no step table for %s", alg.Name())
	}
	key := newKey(t)
	for i, st := range table.steps {
		req := core.Request{Key: key, Cost: st.cost, Terms: &core.Terms{Algorithm: alg, Limit: table.limit, Now: T0.Add(st.at)}}
		d, err := s.Apply(context.Background(), req)
		if err != nil {
			t.Fatalf("step %d: AllowN(T0+%v, %d): %v", i, st.at, st.cost, err)
		}
		if d.Allowed != st.allowed || d.Remaining != st.remaining || d.RetryAfter != st.retry {
			t.Errorf("step %d: AllowN(T0+%v, %d) = allowed %v, remaining %d, retry %v; want %v, %d, %v",
				i, st.at, st.cost, d.Allowed, d.Remaining, d.RetryAfter, st.allowed, st.remaining, st.retry)
		}
	}
}

// testTrace runs a random trace of every operation through the store and
// through the algorithm's Go transition (core.Run, as a store runs it),
// and wants identical decisions, down to their levels and instants.
func testTrace(t *testing.T, s core.Store, alg core.Algorithm) {
	rng, seed := newRand()
	limits := traceLimits(alg)
	keys := []string{newKey(t) + ":a", newKey(t) + ":b", newKey(t) + ":c"}
	ref := make(map[string]*core.State)
	now := T0
	limit := limits[0]
	n := traceLength
	if testing.Short() {
		n /= 10
	}
	for i := 0; i < n; i++ {
		switch r := rng.IntN(100); {
		case r < 3:
			limit = limits[rng.IntN(len(limits))]
		case r < 6:
			now = now.Add(-time.Duration(rng.Int64N(int64(limit.Period()))) / us * us)
		default:
			now = now.Add(time.Duration(rng.Int64N(int64(limit.Period())/limit.Rate()*2+1)) / us * us)
		}
		req := core.Request{
			Key:   keys[rng.IntN(len(keys))],
			Cost:  rng.Int64N(limit.Burst()*3/2 + 2),
			Terms: &core.Terms{Algorithm: alg, Limit: limit, Now: now},
		}
		if alg.Name() == "fixed-window" || strings.HasPrefix(alg.Name(), "sliding") {
			req.Cost = rng.Int64N(limit.Rate()*3/2 + 2)
		}
		switch rng.IntN(10) {
		case 0:
			req.Op = core.OpPeek
		case 1:
			req.Op = core.OpRefund
		case 2:
			if w := time.Duration(rng.Int64N(int64(2 * limit.Period()))); core.Reserves(alg) && w > 0 {
				req.Op, req.MaxWait = core.OpReserve, w
			}
		case 3:
			req.Op, req.Cost = core.OpAtMost, max(req.Cost, 1)
		}
		got, err := s.Apply(context.Background(), req)
		if err != nil {
			t.Fatalf("seed %d, op %d: %+v: %v", seed, i, req, err)
		}
		st := ref[req.Key]
		if st == nil {
			st = new(core.State)
			ref[req.Key] = st
		}
		want := core.Run(st, &req, 0)
		switch got.Source {
		case core.SourceStore, core.SourceCache, core.SourceAllotment:
		default:
			t.Fatalf("seed %d, op %d: decision from %v; a working store decides itself", seed, i, got.Source)
		}
		if !sameDecision(got, want) {
			t.Fatalf("seed %d, op %d: %s %v %v cost %d maxwait %v at T0+%v:\n got %+v\nwant %+v",
				seed, i, req.Key[len(req.Key)-1:], limit, req.Op, req.Cost, req.MaxWait, req.Now.Sub(T0), got, want)
		}
	}
}

// newRand returns a generator with a fresh seed, and the seed, which
// failure messages print so that a failing trace can be replayed.
func newRand() (*mrand.Rand, uint64) {
	var b [8]byte
	rand.Read(b[:])
	seed := binary.LittleEndian.Uint64(b[:])
	return mrand.New(mrand.NewPCG(seed, seed)), seed
}

// traceLength is the number of operations in a random trace.
const traceLength = 3000

// traceLimits are the limits a trace switches between: rates that divide
// their period and rates that do not, bursts above and below the rate.
//
// The last two are near the bounds of exact arithmetic, where a store that
// computes in doubles (a Lua script) must still agree: a bucket of almost
// 2^52 units, and a window whose rate × period in µs is almost 2^52. A
// trace uses them only with algorithms that accept them.
func traceLimits(alg core.Algorithm) []core.Limit {
	var limits []core.Limit
	for _, l := range []core.Limit{
		core.PerSecond(10).WithBurst(5),
		core.Per(3, time.Second).WithBurst(7),
		core.Per(7, 1500*time.Millisecond),
		core.PerMinute(50).WithBurst(20),
		core.PerDay(1_000_000).WithBurst(52_000_000_000),
		core.Per(50_000_000, 90*time.Second),
	} {
		if err := l.Validate(); err != nil {
			panic(err) // a mistake in the list above
		}
		if alg.Validate(l) == nil {
			limits = append(limits, l)
		}
	}
	return limits
}

// testConcurrentSafe hammers one key from many goroutines at one instant:
// exactly the capacity must be admitted.
func testConcurrentSafe(t *testing.T, s core.Store, alg core.Algorithm) {
	const goroutines, each = 64, 8
	limit := core.PerMinute(100).WithBurst(100)
	keys := []string{newKey(t) + ":x", newKey(t) + ":y"}
	var admitted [2]atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				k := g % 2
				d, err := s.Apply(context.Background(), core.Request{Key: keys[k], Cost: 1, Terms: &core.Terms{Algorithm: alg, Limit: limit, Now: T0}})
				if err != nil {
					errs <- err
					return
				}
				if d.Allowed {
					admitted[k].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for k := range keys {
		if got := admitted[k].Load(); got != 100 {
			t.Errorf("key %d: %d goroutines admitted %d, want exactly 100", k, goroutines/2, got)
		}
	}
}

// testPeek checks that a peek reports the decision the real call gets and
// charges nothing.
func testPeek(t *testing.T, s core.Store, alg core.Algorithm) {
	ctx := context.Background()
	key := newKey(t)
	limit := core.PerSecond(4)
	for i, at := range []time.Duration{0, 0, 0, 0, 0, 100 * time.Millisecond, 1500 * time.Millisecond} {
		req := core.Request{Key: key, Cost: 1, Op: core.OpPeek, Terms: &core.Terms{Algorithm: alg, Limit: limit, Now: T0.Add(at)}}
		var first core.Decision
		for j := range 3 {
			d, err := s.Apply(ctx, req)
			if err != nil {
				t.Fatalf("call %d: peek: %v", i, err)
			}
			if j == 0 {
				first = d
			} else if !sameDecision(d, first) {
				t.Fatalf("call %d: peek %d = %+v, first peek %+v: a peek changed the state", i, j, d, first)
			}
		}
		req.Op = core.OpCharge
		d, err := s.Apply(ctx, req)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if !sameDecision(d, first) {
			t.Errorf("call %d at T0+%v: AllowN = %+v, peek said %+v", i, at, d, first)
		}
	}
}

// sameDecision reports whether a and b are the same decision, wherever
// they came from and however a decorator marked them: a store with a
// local cache answers a repeated question from it, with the same numbers
// and another Source, and a policy may mark an admission Near its limit.
func sameDecision(a, b core.Decision) bool {
	a.Source, a.Near = b.Source, b.Near
	return a == b
}

// testUnsatisfiable checks that a cost above capacity is denied with
// RetryNever and charges nothing.
func testUnsatisfiable(t *testing.T, s core.Store, alg core.Algorithm) {
	ctx := context.Background()
	key := newKey(t)
	limit := core.PerMinute(5)
	req := core.Request{Key: key, Cost: 2, Terms: &core.Terms{Algorithm: alg, Limit: limit, Now: T0}}
	if d, err := s.Apply(ctx, req); err != nil || !d.Allowed {
		t.Fatalf("AllowN(T0, 2) = %+v, %v; want allowed", d, err)
	}
	for _, cost := range []int64{6, 1 << 40, core.MaxUnits} {
		req.Cost = cost
		d, err := s.Apply(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Unsatisfiable() || d.RetryAfter != core.RetryNever || d.Remaining != 3 || d.Limit != 5 {
			t.Fatalf("AllowN(T0, %d) = %+v; want unsatisfiable, remaining 3, limit 5", cost, d)
		}
	}
	req.Cost = 3
	if d, err := s.Apply(ctx, req); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("AllowN(T0, 3) after unsatisfiable requests = %+v, %v; want allowed with 0 remaining", d, err)
	}
}

// testOwnClock decides on the store's own clock, whatever it reads: a
// limit of 5 a day admits 5 and denies the 6th, with waits within the
// algorithm's horizon.
func testOwnClock(t *testing.T, s core.Store, alg core.Algorithm) {
	ctx := context.Background()
	key := newKey(t)
	limit := core.PerDay(5)
	for i := range 5 {
		d, err := s.Apply(ctx, core.Request{Key: key, Cost: 1, Terms: &core.Terms{Algorithm: alg, Limit: limit}})
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed || d.Remaining != int64(4-i) || d.ResetAfter <= 0 || d.ResetAfter > alg.Horizon(limit) {
			t.Fatalf("request %d on the store's clock = %+v; want allowed, remaining %d, reset within %v", i, d, 4-i, alg.Horizon(limit))
		}
	}
	d, err := s.Apply(ctx, core.Request{Key: key, Cost: 1, Terms: &core.Terms{Algorithm: alg, Limit: limit}})
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > alg.Horizon(limit) {
		t.Fatalf("6th request on the store's clock = %+v; want denied with 0 < retry ≤ %v", d, alg.Horizon(limit))
	}

	// The clock moves, in microseconds: one request a second passes
	// again once the wait it was told has passed. A second request that
	// passes at once is tried again, on a new key, if it may rightly
	// have passed: a second went by between the two (a machine that
	// stalled the test), or the two were decided in different windows of
	// a second (a window's boundary crossed). Only one that passed
	// sooner, within the first's window, is wrong.
	const every = time.Second
	limit = core.Every(every)
	for attempt := 1; ; attempt++ {
		key = newKey(t)
		start := time.Now()
		first, err := s.Apply(ctx, core.Request{Key: key, Cost: 1, Terms: &core.Terms{Algorithm: alg, Limit: limit}})
		if err != nil || !first.Allowed {
			t.Fatalf("first request every second = %+v, %v; want allowed", first, err)
		}
		d, err = s.Apply(ctx, core.Request{Key: key, Cost: 1, Terms: &core.Terms{Algorithm: alg, Limit: limit}})
		late := time.Since(start) >= every || first.At.UnixMicro()/every.Microseconds() != d.At.UnixMicro()/every.Microseconds()
		if err == nil && d.Allowed && late && attempt < 100 {
			continue
		}
		if err != nil || d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > alg.Horizon(limit) {
			t.Fatalf("second request every second = %+v, %v; want denied with 0 < retry ≤ %v", d, err, alg.Horizon(limit))
		}
		break
	}
	time.Sleep(d.RetryAfter + 5*time.Millisecond)
	if d, err := s.Apply(ctx, core.Request{Key: key, Cost: 1, Terms: &core.Terms{Algorithm: alg, Limit: limit}}); err != nil || !d.Allowed {
		t.Fatalf("a request after the wait it was told = %+v, %v; want allowed: the store's clock does not move", d, err)
	}
}

// testKeys checks that keys, and one key under two algorithms, are
// independent, and that awkward keys work.
func testKeys(t *testing.T, s core.Store) {
	ctx := context.Background()
	base := newKey(t)
	limit := core.PerMinute(2)
	long := base + strings.Repeat("k", core.MaxKeyLen-len(base)-1)
	keys := []string{base, base + "{x}", base + "}{", base + "{}", base + ":ключ:🔑", base + "\x00\n", long + "1", long + "2"}
	for _, alg := range []core.Algorithm{algorithms.TokenBucket, algorithms.FixedWindow} {
		for _, key := range keys {
			for i, want := range []bool{true, true, false} {
				d, err := s.Apply(ctx, core.Request{Key: key, Cost: 1, Terms: &core.Terms{Algorithm: alg, Limit: limit, Now: T0}})
				if err != nil {
					t.Fatalf("%s: key %q: %v", alg.Name(), key, err)
				}
				if d.Allowed != want {
					t.Fatalf("%s: key %q: request %d allowed = %v, want %v: keys or algorithms share state", alg.Name(), key, i, d.Allowed, want)
				}
			}
		}
	}
}

// testBadInput checks that invalid requests fail with the right sentinel
// and charge nothing.
func testBadInput(t *testing.T, s core.Store) {
	ctx := context.Background()
	key := newKey(t)
	ok := core.Request{Key: key, Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerMinute(1), Now: T0}}
	for _, tc := range []struct {
		name   string
		mutate func(*core.Request)
		want   error
	}{
		{"empty key", func(r *core.Request) { r.Key = "" }, core.ErrInvalidKey},
		{"long key", func(r *core.Request) { r.Key = strings.Repeat("k", core.MaxKeyLen+1) }, core.ErrInvalidKey},
		{"no terms", func(r *core.Request) { r.Terms = nil }, core.ErrNoAlgorithm},
		{"no algorithm", func(r *core.Request) { r.Algorithm = nil }, core.ErrNoAlgorithm},
		{"negative cost", func(r *core.Request) { r.Cost = -1 }, core.ErrInvalidCost},
		{"zero limit", func(r *core.Request) { r.Limit = core.Limit{} }, core.ErrInvalidLimit},
		{"zero rate", func(r *core.Request) { r.Limit = core.PerSecond(0) }, core.ErrInvalidLimit},
		{"zero burst", func(r *core.Request) { r.Limit = core.PerSecond(1).WithBurst(0) }, core.ErrInvalidLimit},
		{"sub-microsecond period", func(r *core.Request) { r.Limit = core.Every(time.Nanosecond) }, core.ErrInvalidLimit},
		{"inexact for the algorithm", func(r *core.Request) {
			r.Algorithm, r.Limit = algorithms.SlidingWindowCounter, core.PerDay(1_000_000)
		}, core.ErrInvalidLimit},
		{"cost above 2^52", func(r *core.Request) { r.Cost = core.MaxUnits + 1 }, core.ErrInvalidCost},
		{"before the epoch", func(r *core.Request) { r.Now = time.Unix(-1, 0) }, core.ErrInvalidTime},
		{"after 2112", func(r *core.Request) { r.Now = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC) }, core.ErrInvalidTime},
		{"beyond int64 microseconds", func(r *core.Request) { r.Now = time.Unix(1<<62, 0) }, core.ErrInvalidTime},
	} {
		req := ok.Clone()
		tc.mutate(&req)
		d, err := s.Apply(ctx, req)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
		if d != (core.Decision{}) {
			t.Errorf("%s: decision = %+v with an error, want the zero Decision", tc.name, d)
		}
	}
	if d, err := s.Apply(ctx, ok); err != nil || !d.Allowed {
		t.Fatalf("valid request after bad ones = %+v, %v; want allowed (bad requests charged the key)", d, err)
	}
}

// testInf checks requests under core.Inf: allowed as core.Unlimited at
// the request's instant, a partial admission admitting its whole cost.
func testInf(t *testing.T, s core.Store) {
	key := newKey(t)
	for _, op := range []core.Op{core.OpCharge, core.OpCharge, core.OpPeek, core.OpAtMost} {
		d, err := s.Apply(context.Background(), core.Request{Key: key, Cost: 1 << 40, Op: op, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.Inf, Now: T0}})
		want := core.Unlimited()
		want.At = T0
		if op == core.OpAtMost {
			want.Admitted = 1 << 40
		}
		if err != nil || !sameDecision(d, want) {
			t.Fatalf("Inf %v request = %+v, %v; want %+v", op, d, err, want)
		}
	}
}

func testReset(t *testing.T, s core.Store) {
	ctx := context.Background()
	key := newKey(t)
	if err := s.Reset(ctx, key, algorithms.GCRA); err != nil {
		t.Fatalf("Reset of an unknown key: %v", err)
	}
	for _, alg := range algorithms.All() {
		req := core.Request{Key: key, Cost: 3, Terms: &core.Terms{Algorithm: alg, Limit: core.PerHour(3), Now: T0}}
		for i, want := range []bool{true, false} {
			if d, err := s.Apply(ctx, req); err != nil || d.Allowed != want {
				t.Fatalf("%s: request %d = %+v, %v; want allowed %v", alg.Name(), i, d, err, want)
			}
		}
		if err := s.Reset(ctx, key, alg); err != nil {
			t.Fatalf("%s: Reset: %v", alg.Name(), err)
		}
		if d, err := s.Apply(ctx, req); err != nil || !d.Allowed {
			t.Fatalf("%s: after Reset = %+v, %v; want allowed", alg.Name(), d, err)
		}
	}
	// Reset forgets one key under one algorithm, nothing else.
	other := core.Request{Key: key + ":other", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerHour(1), Now: T0}}
	if d, err := s.Apply(ctx, other); err != nil || !d.Allowed {
		t.Fatalf("another key = %+v, %v; want allowed", d, err)
	}
	if err := s.Reset(ctx, key, algorithms.TokenBucket); err != nil {
		t.Fatal(err)
	}
	if d, err := s.Apply(ctx, other); err != nil || d.Allowed {
		t.Fatalf("another key after Reset(%q) = %+v, %v; want denied: Reset forgot more than its key", key, d, err)
	}
	same := core.Request{Key: key, Cost: 3, Terms: &core.Terms{Algorithm: algorithms.GCRA, Limit: core.PerHour(3), Now: T0}}
	if d, err := s.Apply(ctx, same); err != nil || d.Allowed {
		t.Fatalf("the key under gcra after Reset under token-bucket = %+v, %v; want denied: Reset forgot another algorithm's state", d, err)
	}
	if err := s.Reset(ctx, "", algorithms.GCRA); !errors.Is(err, core.ErrInvalidKey) {
		t.Errorf("Reset of an empty key: err = %v, want %v", err, core.ErrInvalidKey)
	}
	if err := s.Reset(ctx, key, nil); !errors.Is(err, core.ErrNoAlgorithm) {
		t.Errorf("Reset with no algorithm: err = %v, want %v", err, core.ErrNoAlgorithm)
	}
}

func testClose(t *testing.T, s core.Store) {
	ctx := context.Background()
	req := core.Request{Key: newKey(t), Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerMinute(1), Now: T0}}
	if _, err := s.Apply(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Apply(ctx, req); !errors.Is(err, core.ErrClosed) {
		t.Errorf("Apply after Close: err = %v, want %v", err, core.ErrClosed)
	}
	if err := s.Reset(ctx, req.Key, req.Algorithm); !errors.Is(err, core.ErrClosed) {
		t.Errorf("Reset after Close: err = %v, want %v", err, core.ErrClosed)
	}
	other := req.Clone()
	other.Algorithm = algorithms.GCRA
	if err := s.ApplyAll(ctx, []core.Request{req, other}, make([]core.Decision, 2)); !errors.Is(err, core.ErrClosed) {
		t.Errorf("ApplyAll after Close: err = %v, want %v", err, core.ErrClosed)
	}
}

// testRefund runs one random trace on two keys, and on the first of them
// also charges, at random instants, a cost that it refunds at once: every
// decision on the two keys must agree, since a charge refunded at its own
// instant is undone exactly by every algorithm.
func testRefund(t *testing.T, s core.Store, alg core.Algorithm) {
	rng, seed := newRand()
	limit := traceLimits(alg)[0]
	capacity := limit.Burst()
	if alg.Name() == "fixed-window" || strings.HasPrefix(alg.Name(), "sliding") {
		capacity = limit.Rate()
	}
	twin, plain := newKey(t)+":refunded", newKey(t)+":plain"
	ctx := context.Background()
	now := T0
	refunded := 0
	n := traceLength / 2
	if testing.Short() {
		n /= 10
	}
	for i := 0; i < n; i++ {
		now = now.Add(time.Duration(rng.Int64N(int64(limit.Period())/limit.Rate()*2+1)) / us * us)
		if rng.IntN(3) == 0 {
			extra := core.Request{Key: twin, Cost: rng.Int64N(capacity) + 1, Terms: &core.Terms{Algorithm: alg, Limit: limit, Now: now}}
			d, err := s.Apply(ctx, extra)
			if err != nil {
				t.Fatalf("seed %d, op %d: %+v: %v", seed, i, extra, err)
			}
			if d.Allowed {
				extra.Op = core.OpRefund
				if _, err := s.Apply(ctx, extra); err != nil {
					t.Fatalf("seed %d, op %d: refund %+v: %v", seed, i, extra, err)
				}
				refunded++
			}
		}
		req := core.Request{Cost: rng.Int64N(capacity+1) + 1, Terms: &core.Terms{Algorithm: alg, Limit: limit, Now: now}}
		if rng.IntN(5) == 0 {
			req.Op = core.OpPeek
		}
		req.Key = twin
		got, err := s.Apply(ctx, req)
		if err != nil {
			t.Fatalf("seed %d, op %d: %+v: %v", seed, i, req, err)
		}
		req.Key = plain
		want, err := s.Apply(ctx, req)
		if err != nil {
			t.Fatalf("seed %d, op %d: %+v: %v", seed, i, req, err)
		}
		if !sameDecision(got, want) { // a cache may answer either
			t.Fatalf("seed %d, op %d: %v cost %d at T0+%v after %d refunded charges:\n got %+v\nwant %+v (never charged)",
				seed, i, req.Op, req.Cost, now.Sub(T0), refunded, got, want)
		}
	}
	if refunded < n/20 {
		t.Fatalf("seed %d: only %d of %d charges were admitted and refunded", seed, refunded, n)
	}
}

// testReserve checks reservations (core.Terms.MaxWait) and their queue
// bound (core.Terms.MaxQueue) under every algorithm that makes them,
// the token bucket and GCRA alike, and that the others refuse them.
func testReserve(t *testing.T, s core.Store) {
	ctx := context.Background()
	var reservers []core.Algorithm
	for _, alg := range algorithms.All() {
		if core.Reserves(alg) {
			reservers = append(reservers, alg)
			continue
		}
		req := core.Request{Key: newKey(t), Cost: 1, Op: core.OpReserve, Terms: &core.Terms{Algorithm: alg, Limit: core.PerSecond(1), MaxWait: time.Second, Now: T0}}
		if _, err := s.Apply(ctx, req); !errors.Is(err, core.ErrUnsupported) {
			t.Errorf("%s: a reservation = %v, want ErrUnsupported", alg.Name(), err)
		}
	}
	if len(reservers) < 2 {
		t.Fatalf("%d algorithms reserve; want the token bucket and GCRA", len(reservers))
	}
	limit := core.PerSecond(10).WithBurst(2) // a token every 100ms
	ms := time.Millisecond
	for _, alg := range reservers {
		key := newKey(t)
		for i, st := range []struct {
			at      time.Duration
			cost    int64
			wait    time.Duration
			queue   int64
			refund  bool
			allowed bool
			delay   time.Duration
			retry   time.Duration
		}{
			{0, 2, 0, 0, false, true, 0, 0},
			{0, 1, 100 * ms, 0, false, true, 100 * ms, 0},
			{0, 1, 150 * ms, 0, false, false, 0, 200 * ms},  // would be ready at 200ms
			{0, 2, 300 * ms, 0, false, true, 300 * ms, 0},   // 3 tokens owed
			{0, 1, 0, 0, false, false, 0, 400 * ms},         // a plain request waits for the debt
			{0, 1, time.Hour, 3, false, false, 0, 400 * ms}, // a queue of 3 is full
			{0, 2, 0, 0, true, true, 0, 0},                  // give the last 2 back
			{0, 1, time.Hour, 2, false, true, 200 * ms, 0},  // the next moves up
			{0, 1, time.Hour, 2, false, false, 0, 300 * ms},
			{0, 1, 0, 0, true, true, 0, 0},
			{50 * ms, 1, 0, 0, false, false, 0, 150 * ms}, // one and a half owed
			{100 * ms, 1, 200 * ms, 0, false, true, 100 * ms, 0},
			{300 * ms, 2, 0, 0, false, false, 0, 100 * ms},
			{300 * ms, 1, 0, 0, false, true, 0, 0},
		} {
			req := core.Request{Key: key, Cost: st.cost, Terms: &core.Terms{Algorithm: alg, Limit: limit, Now: T0.Add(st.at)}}
			switch {
			case st.refund:
				req.Op = core.OpRefund
			case st.wait > 0:
				req.Op, req.MaxWait, req.MaxQueue = core.OpReserve, st.wait, st.queue
			}
			d, err := s.Apply(ctx, req)
			if err != nil {
				t.Fatalf("%s step %d: %+v: %v", alg.Name(), i, req, err)
			}
			if d.Allowed != st.allowed || d.Delay != st.delay || d.RetryAfter != st.retry {
				t.Errorf("%s step %d: cost %d at T0+%v, wait %v, queue %d, refund %v = allowed %v, delay %v, retry %v; want %v, %v, %v",
					alg.Name(), i, st.cost, st.at, st.wait, st.queue, st.refund, d.Allowed, d.Delay, d.RetryAfter, st.allowed, st.delay, st.retry)
			}
		}
	}
}

// testMulti runs random batches ([core.Store.ApplyAll]) of two or three
// rules, each a random algorithm on one of two keys, at explicit instants,
// against a reference that decides every rule on a copy of its state and
// keeps the copies only if all admitted. Most batches are charges; one in
// ten is a peek, one in ten a partial admission and, if refunds is set,
// one in ten a refund. Every decision must agree: a denied batch charges
// no rule, whether the store decides atomically or charges in turn and
// refunds.
//
// A store that charges in turn leaves a denied batch's window rules as if
// charged and refunded at the batch's instant, which decides alike but
// moves the window a later refund takes its cost from (see
// [core.OpRefund]); refunds is unset for it.
func testMulti(t *testing.T, s core.Store, refunds bool) {
	rng, seed := newRand()
	ctx := context.Background()
	type rule struct {
		alg   core.Algorithm
		limit core.Limit
		keys  [2]string
	}
	rules := make([]rule, 3)
	for i := range rules {
		alg := algorithms.All()[rng.IntN(len(algorithms.All()))]
		limits := traceLimits(alg)[:3] // the slower ones would seldom admit
		rules[i] = rule{
			alg:   core.Named(alg, fmt.Sprintf("r%d", i)),
			limit: limits[rng.IntN(len(limits))],
			keys:  [2]string{newKey(t) + ":a", newKey(t) + ":b"},
		}
	}
	ref := make(reference)
	now := T0
	admitted, denied := 0, 0
	n := traceLength / 4
	if testing.Short() {
		n /= 10
	}
	for b := 0; b < n; b++ {
		// Gaps of up to twice one rule's interval between units keep
		// both outcomes common, whatever the rules' rates.
		l := rules[rng.IntN(len(rules))].limit
		now = now.Add(time.Duration(rng.Int64N(int64(2*l.Period()/time.Duration(l.Rate())))) / us * us)
		op := core.OpCharge
		switch rng.IntN(10) {
		case 0:
			op = core.OpPeek
		case 1:
			if refunds {
				op = core.OpRefund
			}
		case 2:
			op = core.OpAtMost
		}
		var reqs []core.Request
		for i := range rules[:2+rng.IntN(2)] {
			r := rules[i]
			reqs = append(reqs, core.Request{
				Key:   r.keys[rng.IntN(2)],
				Cost:  rng.Int64N(min(capacityOf(r.alg, r.limit), 3)) + 1,
				Op:    op,
				Terms: &core.Terms{Algorithm: r.alg, Limit: r.limit, Now: now},
			})
		}
		if rng.IntN(20) == 0 && op != core.OpAtMost {
			reqs[rng.IntN(len(reqs))].Cost = 0
		}
		got := make([]core.Decision, len(reqs))
		if err := s.ApplyAll(ctx, reqs, got); err != nil {
			t.Fatalf("seed %d, batch %d: ApplyAll: %v", seed, b, err)
		}
		want := ref.decide(reqs)
		// A cache (package layered) may deny a batch from a denial it
		// holds for one rule, asking nothing of the others, which it
		// reports as allowed with no Limit known.
		cached := false
		for i := range got {
			cached = cached || !got[i].Allowed && got[i].Source == core.SourceCache
		}
		all := true
		for i := range reqs {
			all = all && want[i].Allowed
			if cached && got[i].Allowed && got[i].Source == core.SourceCache && got[i].Limit == 0 {
				continue
			}
			if !sameDecision(got[i], want[i]) {
				t.Fatalf("seed %d, batch %d at T0+%v: rule %d (%s, %v, %v cost %d) of %d:\n got %+v\nwant %+v",
					seed, b, now.Sub(T0), i, reqs[i].Algorithm.Name(), reqs[i].Limit, op, reqs[i].Cost, len(reqs), got[i], want[i])
			}
		}
		switch {
		case op != core.OpCharge:
		case all:
			admitted++
		default:
			denied++
		}
	}
	t.Logf("%d batches: %d charges admitted, %d denied", n, admitted, denied)
	if admitted < n/50 || denied < n/50 {
		t.Fatalf("seed %d: %d charges admitted and %d denied of %d batches: too few of one to prove much", seed, admitted, denied, n)
	}
}

// Option adjusts what [Run] expects of a store. Options are made by the
// functions of this package, such as [InTurn].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	inTurn bool
}

// InTurn tells [Run] that the store decides some batches in turn
// ([stores.ApplyInTurn]) rather than in one atomic step, as a Redis Cluster
// store does for keys in different slots. MultiConcurrentSafe then
// checks only that no rule admits more than its capacity: a batch may be
// denied while another batch's charges are waiting to be refunded; and
// Multi's random batches hold no refunds, which a window algorithm's key
// charged and refunded by a denied batch does not take exactly as if
// never charged. Every other check is the same: batches decided one at a
// time must still get exactly the reference's decisions.
func InTurn() Option { return optionFunc(func(c *config) { c.inTurn = true }) }

// testMultiConcurrentSafe has 64 goroutines send two-rule requests at one
// instant: a per-user rule (100 per user, two users) and a shared rule
// (150 in all). No rule may admit more than its capacity; a store that
// decides batches atomically admits exactly 150 (exact), and one that
// charges in turn and refunds ([InTurn]) may deny a few more while
// refunds are in flight.
func testMultiConcurrentSafe(t *testing.T, s core.Store, exact bool) {
	const goroutines, each = 64, 8
	user := core.Named(algorithms.TokenBucket, "user")
	shared := core.Named(algorithms.FixedWindow, "shared")
	users := []string{newKey(t) + ":x", newKey(t) + ":y"}
	all := newKey(t) + ":all"
	var admitted [2]atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			for range each {
				k := g % 2
				reqs := []core.Request{
					{Key: users[k], Cost: 1, Terms: &core.Terms{Algorithm: user, Limit: core.PerMinute(100), Now: T0}},
					{Key: all, Cost: 1, Terms: &core.Terms{Algorithm: shared, Limit: core.PerMinute(150), Now: T0}},
				}
				out := make([]core.Decision, 2)
				if err := s.ApplyAll(context.Background(), reqs, out); err != nil {
					errs <- err
					return
				}
				if out[0].Allowed && out[1].Allowed {
					admitted[k].Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	x, y := admitted[0].Load(), admitted[1].Load()
	t.Logf("admitted %d and %d (limits 100 each, 150 together) of %d", x, y, goroutines*each)
	if x > 100 || y > 100 || x+y > 150 {
		t.Fatalf("admitted %d and %d: more than 100 for a user or 150 together", x, y)
	}
	if exact && x+y != 150 {
		t.Errorf("an atomic store admitted %d together, want exactly 150", x+y)
	}
	// The rules' states agree with the admissions: nothing denied stayed
	// charged.
	d, err := s.Apply(context.Background(), core.Request{Key: all, Cost: 1, Op: core.OpPeek, Terms: &core.Terms{Algorithm: shared, Limit: core.PerMinute(150), Now: T0}})
	if err != nil {
		t.Fatal(err)
	}
	if d.Remaining != 150-(x+y) {
		t.Errorf("the shared rule has %d left after %d admissions, want %d: a denied request stayed charged", d.Remaining, x+y, 150-(x+y))
	}
}

// testLeases runs a step table of concurrency leases at fixed instants:
// acquisitions up to the limit, releases, renewals, anonymous slots, and
// leases abandoned by their holders, which expire.
func testLeases(t *testing.T, s core.Store) {
	ctx := context.Background()
	key := newKey(t)
	limit := core.Per(2, 10*time.Second) // 2 in flight, leases live 10s
	sec := time.Second
	for i, st := range []struct {
		at      time.Duration
		lease   int64
		cost    int64
		release bool
		allowed bool
		left    int64
		retry   time.Duration
	}{
		{0, 1, 1, false, true, 1, 0},
		{sec, 2, 1, false, true, 0, 0},
		{2 * sec, 3, 1, false, false, 0, 8 * sec}, // lease 1 expires at 10s
		{2 * sec, 3, 3, false, false, 0, core.RetryNever},
		{3 * sec, 1, 0, true, true, 1, 0},          // release lease 1
		{3 * sec, 1, 0, true, true, 1, 0},          // again: nothing to do
		{4 * sec, 3, 1, false, true, 0, 0},         // its slot is free
		{5 * sec, 2, 1, false, true, 0, 0},         // renew lease 2: now until 15s
		{12 * sec, 4, 1, false, false, 0, 2 * sec}, // lease 3 (abandoned) expires at 14s
		{14 * sec, 4, 1, false, true, 0, 0},
		{15 * sec, 0, 1, false, true, 0, 0}, // lease 2 expired: an anonymous slot
		{15 * sec, 0, 1, false, false, 0, 9 * sec},
		{16 * sec, 0, 1, true, true, 1, 0},  // release an anonymous slot
		{30 * sec, 5, 2, false, true, 0, 0}, // everything abandoned has expired
	} {
		req := core.Request{Key: key, Cost: st.cost, Lease: st.lease, Terms: &core.Terms{Algorithm: algorithms.Concurrency, Limit: limit, Now: T0.Add(st.at)}}
		if st.release {
			req.Op = core.OpRefund
		}
		d, err := s.Apply(ctx, req)
		if err != nil {
			t.Fatalf("step %d: %+v: %v", i, req, err)
		}
		if d.Allowed != st.allowed || d.Remaining != st.left || d.RetryAfter != st.retry {
			t.Errorf("step %d: lease %d cost %d release %v at T0+%v = allowed %v, remaining %d, retry %v; want %v, %d, %v",
				i, st.lease, st.cost, st.release, st.at, d.Allowed, d.Remaining, d.RetryAfter, st.allowed, st.left, st.retry)
		}
	}
}

// testLeasesConcurrentSafe has 16 goroutines acquire, hold and release
// leases on one key on the store's own clock, counting the holders
// themselves: never more than the limit hold a lease at once, and once all
// have released, every slot is free. Sixteen are three times the limit,
// and a shorter queue than 64 for a store that serves one key's calls
// one at a time (miniredis, a database's row lock): behind 64, a release
// waited past core.CleanupTimeout at a load of 15 to 20 on two cores. A
// release not confirmed in time is tried again, up to cleanupTries.
func testLeasesConcurrentSafe(t *testing.T, s core.Store) {
	const goroutines, each, n, cleanupTries = 16, 40, 5, 5
	lim, err := sluice.NewLimiter(s, algorithms.Concurrency, core.Per(n, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	key := newKey(t)
	ctx := context.Background()
	var holding, most, acquired, retried atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for range goroutines {
		wg.Go(func() {
			for range each {
				l, err := lim.Acquire(ctx, key)
				if err != nil {
					errs <- err
					return
				}
				if !l.OK() {
					continue
				}
				acquired.Add(1)
				h := holding.Add(1)
				for m := most.Load(); h > m && !most.CompareAndSwap(m, h); m = most.Load() {
				}
				time.Sleep(time.Millisecond)
				holding.Add(-1)
				// A release the store could not confirm within
				// core.CleanupTimeout is tried again, as Lease.Release's
				// callers may: a loaded machine can queue it that long
				// behind the others. Its slot stays held meanwhile, so
				// the count of holders still bounds the store's.
				err = l.Release(ctx)
				for try := 1; errors.Is(err, core.ErrCleanup) && try < cleanupTries; try++ {
					retried.Add(1)
					err = l.Release(ctx)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d leases acquired by %d goroutines, at most %d held at once (limit %d); %d releases tried again", acquired.Load(), goroutines, most.Load(), n, retried.Load())
	if most.Load() > n {
		t.Fatalf("%d holders at once, limit %d", most.Load(), n)
	}
	if acquired.Load() < n {
		t.Fatalf("only %d leases acquired", acquired.Load())
	}
	// A peek reports what would be left after one more acquisition.
	if d, err := lim.Peek(ctx, key); err != nil || !d.Allowed || d.Remaining != n-1 {
		t.Errorf("after every release: peek %+v, %v; want all %d slots free", d, err, n)
	}
}
