package redisstore_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores"
	"github.com/sluicehq/sluice/stores/internal/redisengine"
	"github.com/sluicehq/sluice/stores/redisstore"
)

// parityLimits are the limits parity runs switch between: small and large
// rates, periods that do and do not divide evenly into microseconds, and
// capacities near 2^52. Each algorithm uses those it accepts.
var parityLimits = []core.Limit{
	core.PerSecond(10).WithBurst(20),
	core.PerSecond(10),
	core.Per(3, 7*time.Second).WithBurst(5),
	core.Every(20 * time.Millisecond),
	core.PerMinute(100).WithBurst(7),
	core.Per(7, 3*time.Microsecond).WithBurst(9),
	core.PerHour(5000).WithBurst(40),
	core.PerDay(1_000_000).WithBurst(52_000_000_000),
	core.Per(50_000_000, 90*time.Second),
	core.Per(9_000, 1500*time.Millisecond),
}

// parityStart is the instant, in µs, parity runs begin at.
var parityStart = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()

// walk is a random walk of operations on one key, decided by the Go
// transition on a state it never forgets: [walk.step] draws the next
// request, from the instant the walk began at (µs), switching among the
// limits it was given that its algorithm accepts. Instants stay within
// 1970 to 2112 and costs within 2^52, so that every request is valid.
type walk struct {
	alg    core.Algorithm
	key    string
	rng    *rand.Rand
	limits []core.Limit // the usable ones; limit is one of them
	limit  core.Limit
	now    int64
	state  core.State
	// The outcomes seen (partial counts the partial admissions that
	// admitted less than their cost, but something).
	allowed, denied, never, refunds, delayed, partial int
}

// newWalk returns a walk of alg on key, drawing from rng, from start
// (µs), or nil if alg accepts none of limits.
func newWalk(alg core.Algorithm, key string, rng *rand.Rand, limits []core.Limit, start int64) *walk {
	w := &walk{alg: alg, key: key, rng: rng, now: start}
	for _, l := range limits {
		if l.Validate() == nil && alg.Validate(l) == nil {
			w.limits = append(w.limits, l)
		}
	}
	if len(w.limits) == 0 {
		return nil
	}
	w.limit = w.limits[0]
	return w
}

// step draws the next request and returns it with the Go transition's
// decision, which it has applied to the walk's state.
func (w *walk) step() (core.Request, core.Decision) {
	rng, alg := w.rng, w.alg
	if rng.IntN(50) == 0 {
		w.limit = w.limits[rng.IntN(len(w.limits))]
	}
	limit := w.limit
	period := limit.PeriodMicros()
	switch rng.IntN(10) {
	case 0: // a clock that steps back
		w.now -= rng.Int64N(period + 1)
	case 1, 2, 3:
		// the same instant
	case 4:
		w.now += rng.Int64N(3*period + 1)
	default:
		w.now += rng.Int64N(period/max(limit.Rate(), 1) + 2)
	}
	w.now = min(max(w.now, 0), core.MaxUnits-1)
	capacity := limit.Burst()
	if alg != algorithms.TokenBucket && alg != algorithms.GCRA {
		capacity = limit.Rate()
	}
	var cost int64
	switch rng.IntN(10) {
	case 0:
		cost = 0
	case 1:
		cost = min(capacity+1+rng.Int64N(3), core.MaxUnits) // unsatisfiable, or all of 2^52
	case 2:
		cost = rng.Int64N(capacity) + 1
	default:
		cost = rng.Int64N(min(capacity, 3)) + 1
	}
	req := core.Request{Key: w.key, Cost: cost, Terms: &core.Terms{Algorithm: alg, Limit: limit, Now: time.UnixMicro(w.now)}}
	switch rng.IntN(9) {
	case 0:
		req.Op = core.OpPeek
	case 1:
		req.Op = core.OpRefund
	case 8:
		// A partial admission of up to cost (at least 1): the Lua's
		// two passes against core.Run's.
		req.Op, req.Cost = core.OpAtMost, max(cost, 1)
	case 2, 3:
		if core.Reserves(alg) {
			req.Op, req.MaxWait = core.OpReserve, time.Duration(rng.Int64N(3*period)+1)*time.Microsecond
			if rng.IntN(50) == 0 {
				req.MaxWait = math.MaxInt64 // a debt of 2^52 units
			}
		}
	}
	return req, core.Run(&w.state, &req, 0)
}

// check compares the store's decision got (or its error) for the request
// req of the walk's op i with the Go transition's, want, and counts the
// outcome.
func (w *walk) check(i int, req core.Request, want, got core.Decision, err error) error {
	switch {
	case err != nil:
		return fmt.Errorf("key %s, op %d: Apply(now=%d, %v, cost=%d, %v, maxwait=%v): %w", w.key, i, w.now, req.Op, req.Cost, req.Limit, req.MaxWait, err)
	case got != want:
		return fmt.Errorf("key %s, op %d: Apply(now=%d, %v, cost=%d, %v, maxwait=%v)\n got %+v\nwant %+v\nstate %+v", w.key, i, w.now, req.Op, req.Cost, req.Limit, req.MaxWait, got, want, w.state)
	}
	if got.Allowed && req.Op == core.OpAtMost && got.Admitted < req.Cost {
		w.partial++
	}
	switch {
	case req.Op == core.OpRefund:
		w.refunds++
	case got.Delay > 0:
		w.delayed++
		w.allowed++
	case got.Allowed:
		w.allowed++
	case got.Unsatisfiable():
		w.never++
	default:
		w.denied++
	}
	return nil
}

// parity runs ops operations of a walk of alg on key through store, from
// start (µs), and fails at the first decision the store and the Go
// transition disagree on. It returns the outcomes; a zero walk if alg
// accepts none of limits.
func parity(t *testing.T, store core.Store, alg core.Algorithm, key string, rng *rand.Rand, ops int, limits []core.Limit, start int64) walk {
	t.Helper()
	w := newWalk(alg, key, rng, limits, start)
	if w == nil {
		return walk{}
	}
	ctx := context.Background()
	for i := range ops {
		req, want := w.step()
		got, err := store.Apply(ctx, req)
		if err := w.check(i, req, want, got, err); err != nil {
			t.Fatal(err)
		}
	}
	return *w
}

func TestParity(t *testing.T) {
	client := scriptClient(t)
	for _, form := range forms {
		store, err := form.new(client, redisstore.Config{Prefix: "parity-" + form.name + ":"})
		if err != nil {
			t.Fatal(err)
		}
		for _, alg := range algorithms.All() {
			t.Run(form.name+"/"+alg.Name(), func(t *testing.T) {
				t.Parallel()
				seed := rand.Uint64()
				t.Logf("seed %d", seed)
				const ops = 10_000
				w := parity(t, store, alg, fmt.Sprintf("k%d", seed), rand.New(rand.NewPCG(seed, 1)), ops, parityLimits, parityStart)
				t.Logf("%d ops: %d allowed (%d reserved with a delay, %d admitted in part), %d denied, %d unsatisfiable, %d refunds", ops, w.allowed, w.delayed, w.partial, w.denied, w.never, w.refunds)
				// A run that never denies proves little.
				if w.allowed < ops/20 || w.denied < ops/20 || w.never < ops/50 || w.refunds < ops/20 || w.partial < ops/500 {
					t.Fatalf("too few of some outcome")
				}
				if rs, ok := alg.(core.Reserver); ok && rs.Reserves() && w.delayed < ops/50 {
					t.Fatalf("too few reservations with a delay")
				}
			})
		}
	}
}

// forms are the two forms of the scripts a store sends: Redis's own, and
// the portable form for a server whose Lua lacks the struct library.
var forms = []struct {
	name   string
	new    func(redis.UniversalClient, redisstore.Config) (*redisstore.Store, error)
	script func(*algorithms.Script) *algorithms.Script
}{
	{"struct", redisstore.New, func(s *algorithms.Script) *algorithms.Script { return s }},
	{"portable", redisstore.NewPortable, (*algorithms.Script).Portable},
}

// Parity over many short sequences: sequences per algorithm, of 1
// to maxSeqOps operations each, sent seqBatch at a time in one pipeline.
const (
	sequences = 10_000
	maxSeqOps = 16
	seqBatch  = 1000
)

// TestParitySequences compares the Lua twins with the Go transitions over
// 10,000 random sequences per algorithm, each of 1 to 16 operations on a
// key of its own: where TestParity follows one key through 10,000
// operations, these start from a fresh state every time (a peek, refund,
// reservation or partial admission of a key never charged), at instants
// anywhere from 1970 to 2112, under a limit drawn for each. The sequences
// run in lockstep, their k-th operations sent together as pipelines of
// EVALSHA calls of the scripts themselves, so that the test measures the
// scripts and not a client. Sequence i of an algorithm draws from the
// logged seed and i, and its key names both.
func TestParitySequences(t *testing.T) {
	t.Parallel()
	client := scriptClient(t)
	ctx := context.Background()
	for _, form := range forms {
		for _, alg := range algorithms.All() {
			t.Run(form.name+"/"+alg.Name(), func(t *testing.T) {
				seed := rand.Uint64()
				t.Logf("seed %d", seed)
				walks := make([]*walk, 0, sequences)
				ops := make([]int, 0, sequences)
				for i := range sequences {
					rng := rand.New(rand.NewPCG(seed, uint64(i)))
					first := rng.IntN(len(parityLimits))
					limits := append(slices.Clone(parityLimits[first:]), parityLimits[:first]...)
					n := 1 + rng.IntN(maxSeqOps)
					if w := newWalk(alg, fmt.Sprintf("s%d-%d", seed, i), rng, limits, rng.Int64N(core.MaxUnits)); w != nil {
						walks, ops = append(walks, w), append(ops, n)
					}
				}
				total := 0
				for k := range maxSeqOps {
					var due []*walk
					for i, w := range walks {
						if k < ops[i] {
							due = append(due, w)
						}
					}
					for len(due) > 0 {
						batch := due[:min(seqBatch, len(due))]
						due = due[len(batch):]
						if err := lockstep(ctx, client, form.script, batch, k); err != nil {
							t.Fatal(err)
						}
						total += len(batch)
					}
				}
				var sum walk
				for _, w := range walks {
					sum.allowed += w.allowed
					sum.denied += w.denied
					sum.never += w.never
					sum.refunds += w.refunds
					sum.partial += w.partial
				}
				t.Logf("%d sequences, %d ops: %d allowed (%d admitted in part), %d denied, %d unsatisfiable, %d refunds", len(walks), total, sum.allowed, sum.partial, sum.denied, sum.never, sum.refunds)
				if len(walks) < sequences || sum.allowed < total/20 || sum.denied < total/50 || sum.never < total/50 || sum.refunds < total/20 || sum.partial < total/500 {
					t.Fatalf("too few sequences or too few of some outcome")
				}
			})
		}
	}
}

// lockstep takes the next step of each of walks, op k of each, sends the
// requests' scripts as one pipeline (loading a script Redis does not
// have) and checks each reply against the Go transition's decision.
func lockstep(ctx context.Context, client *redis.Client, form func(*algorithms.Script) *algorithms.Script, walks []*walk, k int) error {
	reqs := make([]core.Request, len(walks))
	wants := make([]core.Decision, len(walks))
	cmds := make([]*redis.Cmd, len(walks))
	pipe := client.Pipeline()
	loaded := map[string]bool{}
	for i, w := range walks {
		reqs[i], wants[i] = w.step()
		script, err := redisengine.Script(&reqs[i])
		if err != nil {
			return err
		}
		script = form(script)
		if !loaded[script.Hash()] {
			if err := client.ScriptLoad(ctx, script.Source()).Err(); err != nil {
				return err
			}
			loaded[script.Hash()] = true
		}
		key := redisengine.Key("paritys:", w.key, w.alg.Name())
		cmds[i] = pipe.EvalSha(ctx, script.Hash(), []string{key}, string(redisengine.AppendArgs(nil, &reqs[i])))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("op %d of %d sequences: %w", k, len(walks), err)
	}
	for i, w := range walks {
		got, err := decodeReply(cmds[i])
		if err := w.check(k, reqs[i], wants[i], got, err); err != nil {
			return err
		}
	}
	return nil
}

// decodeReply reads a script's packed decision from cmd.
func decodeReply(cmd *redis.Cmd) (core.Decision, error) {
	reply, err := cmd.Text()
	if err != nil {
		return core.Decision{}, err
	}
	if len(reply) != redisengine.ReplySize {
		return core.Decision{}, fmt.Errorf("a reply of %d bytes, want %d", len(reply), redisengine.ReplySize)
	}
	return redisengine.Decode(reply)
}

// bytesSource feeds a fuzzer's input to math/rand, eight bytes a number,
// so that the fuzzer's mutations change the operations parity runs. Past
// the input's end it goes on with a fixed stream: math/rand rejects some
// draws, and a source stuck at one value could make it loop for ever.
type bytesSource struct {
	in   []byte
	more rand.PCG
}

func (b *bytesSource) Uint64() uint64 {
	if len(b.in) < 8 {
		return b.more.Uint64()
	}
	v := binary.BigEndian.Uint64(b.in)
	b.in = b.in[8:]
	return v
}

// FuzzParity drives the parity comparison from a fuzzer's input. It sends
// the scripts with redistest's small RESP client rather than go-redis:
// under -fuzz every package is instrumented, and go-redis's share of each
// run would cut the runs a second a hundredfold.
func FuzzParity(f *testing.F) {
	srv := redistest.Shared(f)
	store := stores.Func(func(_ context.Context, req core.Request) (core.Decision, error) {
		script, err := redisengine.Script(&req)
		if err != nil {
			return core.Decision{}, err
		}
		key := redisengine.Key("fuzz:", req.Key, req.Algorithm.Name())
		args := string(redisengine.AppendArgs(nil, &req))
		r, err := srv.Do("EVALSHA", script.Hash(), "1", key, args)
		var re *redistest.RedisError
		if errors.As(err, &re) && re.Prefix() == "NOSCRIPT" {
			r, err = srv.Do("EVAL", script.Source(), "1", key, args)
		}
		if err != nil {
			return core.Decision{}, err
		}
		reply, err := r.String()
		if err != nil || len(reply) != redisengine.ReplySize {
			return core.Decision{}, fmt.Errorf("reply %v: %v", r, err)
		}
		return redisengine.Decode(reply)
	})
	seed := rand.New(rand.NewPCG(1, 2))
	for range 8 {
		in := make([]byte, 1024)
		for i := range in {
			in[i] = byte(seed.Uint32())
		}
		f.Add(uint8(seed.Uint32()), in)
	}
	f.Fuzz(func(t *testing.T, a uint8, in []byte) {
		all := algorithms.All()
		alg := all[int(a)%len(all)]
		src := &bytesSource{in: in}
		// One key per input: a run must not see another's state, even in
		// another fuzzing process.
		parity(t, store, alg, fmt.Sprintf("f%x", rand.Uint64()), rand.New(src), min(len(in)/8, 300), parityLimits, parityStart)
	})
}

// TestParityDeepDebt takes a token bucket deep into debt with reservations,
// then decides under a limit whose tokens are far larger: the carried debt
// must stay within 2^52 units, alike in Go and Lua (review finding: Go's
// product overflowed and admitted; Lua lost exactness and denied).
func TestParityDeepDebt(t *testing.T) {
	client := scriptClient(t)
	store, err := redisstore.New(client, redisstore.Config{Prefix: "deepdebt:"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var state core.State
	key := fmt.Sprintf("d%x", rand.Uint64())
	t0 := parityStart
	steps := []core.Request{
		{Cost: 200_000_000, Op: core.OpReserve, Terms: &core.Terms{Limit: core.Per(1_000_000, time.Second).WithBurst(200_000_000), MaxWait: 1000 * time.Second}},
		{Cost: 200_000_000, Op: core.OpReserve, Terms: &core.Terms{Limit: core.Per(1_000_000, time.Second).WithBurst(200_000_000), MaxWait: 1000 * time.Second}},
		{Cost: 1, Terms: &core.Terms{Limit: core.PerDay(1), Now: time.UnixMicro(t0 + 1)}},
		{Cost: 4, Op: core.OpReserve, Terms: &core.Terms{Limit: core.Per(1, core.MaxPeriod).WithBurst(4), MaxWait: math.MaxInt64}},
		{Cost: 4, Op: core.OpReserve, Terms: &core.Terms{Limit: core.Per(1, core.MaxPeriod).WithBurst(4), MaxWait: math.MaxInt64}},
		{Cost: 1, Terms: &core.Terms{Limit: core.PerSecond(3)}},
	}
	for i, req := range steps {
		req.Key, req.Algorithm = key, algorithms.TokenBucket
		if req.Now.IsZero() {
			req.Now = time.UnixMicro(t0 + int64(i))
		}
		want := core.Run(&state, &req, 0)
		got, err := store.Apply(ctx, req)
		if err != nil {
			t.Fatalf("step %d: %+v: %v", i, req, err)
		}
		if got != want {
			t.Fatalf("step %d: %v cost %d maxwait %v\n got %+v\nwant %+v", i, req.Limit, req.Cost, req.MaxWait, got, want)
		}
	}
}

// TestParityConcurrency compares the concurrency algorithm's Lua twin with
// its Go transition over random acquisitions, renewals, releases and
// peeks of a few leases (and anonymous ones), with gaps around the leases'
// time to live and changes of limit.
func TestParityConcurrency(t *testing.T) {
	client := scriptClient(t)
	store, err := redisstore.New(client, redisstore.Config{Prefix: "parityc:"})
	if err != nil {
		t.Fatal(err)
	}
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 3))
	limits := []core.Limit{core.Per(3, time.Second), core.Per(5, 200*time.Millisecond), core.Per(1, time.Minute), core.Per(8, 3*time.Second)}
	ctx := context.Background()
	var state core.State
	key := fmt.Sprintf("c%x", seed)
	now := parityStart
	limit := limits[0]
	var allowed, denied, released int
	for i := range 5000 {
		if rng.IntN(40) == 0 {
			limit = limits[rng.IntN(len(limits))]
		}
		now += rng.Int64N(limit.PeriodMicros() / 2)
		req := core.Request{Key: key, Cost: rng.Int64N(3), Lease: rng.Int64N(6), Terms: &core.Terms{Algorithm: algorithms.Concurrency, Limit: limit, Now: time.UnixMicro(now)}}
		if rng.IntN(3) == 0 {
			req.Lease = 0 // anonymous slots, released latest first
		}
		switch rng.IntN(6) {
		case 0:
			req.Op = core.OpRefund
		case 1:
			req.Op = core.OpPeek
		case 2:
			req.Cost = limit.Rate() + 1 // unsatisfiable
		}
		want := core.Run(&state, &req, 0)
		got, err := store.Apply(ctx, req)
		if err != nil {
			t.Fatalf("seed %d, op %d: %+v: %v", seed, i, req, err)
		}
		if got != want {
			t.Fatalf("seed %d, op %d: %v %v cost %d lease %d\n got %+v\nwant %+v\nstate %+v", seed, i, req.Op, limit, req.Cost, req.Lease, got, want, state)
		}
		switch {
		case req.Op == core.OpRefund:
			released++
		case got.Allowed:
			allowed++
		default:
			denied++
		}
	}
	t.Logf("seed %d: 5000 ops: %d allowed, %d denied, %d releases", seed, allowed, denied, released)
	if allowed < 500 || denied < 500 {
		t.Fatalf("too few of one outcome")
	}
}

// scriptClient returns a client of the test server for the tests that
// call the scripts themselves: no retries, and a minute for a reply,
// since a loaded machine can hold a large pipeline's reply past
// go-redis's default of 3 s and these tests assert what the scripts
// answer, not when.
func scriptClient(t *testing.T) *redis.Client {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: testAddr(t), MaxRetries: -1, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	t.Cleanup(func() { client.Close() })
	return client
}
