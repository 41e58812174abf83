package storetest_test

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores"
	"github.com/sluicehq/sluice/stores/memstore"
	"github.com/sluicehq/sluice/stores/storetest"
)

// TestSuiteCatchesBrokenStores runs the suite, in a child process, against
// stores broken in known ways, and wants each to fail where it should: a
// suite that passes a broken store proves nothing.
func TestSuiteCatchesBrokenStores(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole suite once per broken store")
	}
	for _, tc := range []struct{ broken, fails string }{
		{"charges-peeks", "Peek/"},
		{"ignores-now", "Steps/"},
		{"read-modify-write", "ConcurrentSafe/"},
		{"swallows-errors", "BadInput"},
		{"short-keys", "Keys"},
		{"remaining-off-by-one", "Trace/"},
		{"resets-everything", "Reset"},
		{"frozen-clock", "OwnClock/"},
		{"truncates-long-keys", "Keys"},
		{"fails-open", "Trace/"},
		{"admits-huge-costs", "Unsatisfiable/"},
		{"decides-in-turn", "BatchDenied/"},
		{"keeps-denied-batches", "Multi"},
		{"charges-batched-peeks", "BatchPeek/"},
		{"reserves-no-debt", "BatchReserve/"},
		{"drops-batched-refunds", "BatchRefund/"},
		{"drops-batched-leases", "BatchLeases/"},
		{"lets-bad-batches-in", "BatchBadInput"},
	} {
		t.Run(tc.broken, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenStore$", "-test.v")
			cmd.Env = append(os.Environ(), "STORETEST_BROKEN="+tc.broken)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a store that %s:\n%s", tc.broken, out)
			}
			if want := "--- FAIL: TestBrokenStore/" + tc.fails; !strings.Contains(string(out), want) {
				t.Fatalf("output lacks %q:\n%s", want, out)
			}
		})
	}
}

// TestBrokenStore runs the suite against the broken store that
// TestSuiteCatchesBrokenStores names in the environment.
func TestBrokenStore(t *testing.T) {
	broken := os.Getenv("STORETEST_BROKEN")
	if broken == "" {
		t.Skip("run by TestSuiteCatchesBrokenStores")
	}
	var opts []storetest.Option
	if _, ok := breakStore(broken, nil).(brokenBatch); !ok {
		// The break is in Apply, through which batches are decided in
		// turn.
		opts = append(opts, storetest.InTurn())
	}
	storetest.Run(t, func(t *testing.T) core.Store {
		inner, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { inner.Close() })
		return breakStore(broken, inner)
	}, opts...)
}

// brokenApply is a store whose Apply is broken: its ApplyAll decides in
// turn through the broken Apply, and Reset and Close reach the memstore.
type brokenApply struct {
	*memstore.Store
	apply func(ctx context.Context, req core.Request) (core.Decision, error)
}

func (b brokenApply) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	return b.apply(ctx, req)
}

func (b brokenApply) ApplyAll(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	if err := stores.ValidateAll(reqs, out); err != nil {
		return err
	}
	return stores.ApplyInTurn(ctx, b, reqs, out)
}

// brokenBatch is a store whose ApplyAll is broken: Apply, Reset and Close
// are the memstore's.
type brokenBatch struct {
	*memstore.Store
	applyAll func(ctx context.Context, reqs []core.Request, out []core.Decision) error
}

func (b brokenBatch) ApplyAll(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	return b.applyAll(ctx, reqs, out)
}

func breakStore(broken string, inner *memstore.Store) core.Store {
	apply := func(f func(ctx context.Context, req core.Request) (core.Decision, error)) core.Store {
		return brokenApply{inner, f}
	}
	batch := func(f func(ctx context.Context, reqs []core.Request, out []core.Decision) error) core.Store {
		return brokenBatch{inner, f}
	}
	// changeOp is the memstore's ApplyAll with each request changed by f
	// first.
	changeOp := func(f func(r *core.Request)) core.Store {
		return batch(func(ctx context.Context, reqs []core.Request, out []core.Decision) error {
			reqs = slices.Clone(reqs)
			for i := range reqs {
				f(&reqs[i])
			}
			return inner.ApplyAll(ctx, reqs, out)
		})
	}
	switch broken {
	case "charges-peeks":
		return apply(func(ctx context.Context, req core.Request) (core.Decision, error) {
			if req.Op == core.OpPeek {
				req.Op = core.OpCharge
			}
			return inner.Apply(ctx, req)
		})
	case "ignores-now":
		return apply(func(ctx context.Context, req core.Request) (core.Decision, error) {
			req = req.Clone()
			req.Now = time.Time{}
			return inner.Apply(ctx, req)
		})
	case "swallows-errors":
		return apply(func(ctx context.Context, req core.Request) (core.Decision, error) {
			d, err := inner.Apply(ctx, req)
			if err != nil {
				return core.Decision{Allowed: true}, nil
			}
			return d, nil
		})
	case "short-keys":
		return apply(func(ctx context.Context, req core.Request) (core.Decision, error) {
			req.Key = req.Key[:min(len(req.Key), 16)]
			return inner.Apply(ctx, req)
		})
	case "remaining-off-by-one":
		return apply(func(ctx context.Context, req core.Request) (core.Decision, error) {
			d, err := inner.Apply(ctx, req)
			if d.Remaining > 0 {
				d.Remaining++
			}
			return d, err
		})
	case "read-modify-write":
		return &unatomic{states: make(map[string]core.State)}
	case "resets-everything":
		return &flusher{store: inner}
	case "frozen-clock":
		return apply(func(ctx context.Context, req core.Request) (core.Decision, error) {
			if req.Terms != nil && req.Now.IsZero() {
				req = req.Clone()
				req.Now = storetest.T0
			}
			return inner.Apply(ctx, req)
		})
	case "truncates-long-keys":
		return apply(func(ctx context.Context, req core.Request) (core.Decision, error) {
			req.Key = req.Key[:min(len(req.Key), 1000)]
			return inner.Apply(ctx, req)
		})
	case "fails-open":
		return apply(func(ctx context.Context, req core.Request) (core.Decision, error) {
			d, err := inner.Apply(ctx, req)
			d.Source = core.SourceFailOpen
			return d, err
		})
	case "admits-huge-costs":
		return apply(func(ctx context.Context, req core.Request) (core.Decision, error) {
			if req.Cost > 1<<30 {
				return core.Decision{Allowed: true}, nil
			}
			return inner.Apply(ctx, req)
		})
	case "decides-in-turn":
		// Correct, but does not say so with storetest.InTurn.
		return batch(func(ctx context.Context, reqs []core.Request, out []core.Decision) error {
			if err := stores.ValidateAll(reqs, out); err != nil {
				return err
			}
			return stores.ApplyInTurn(ctx, inner, reqs, out)
		})
	case "keeps-denied-batches":
		// Charges in turn, and refunds nothing after a denial.
		return batch(func(ctx context.Context, reqs []core.Request, out []core.Decision) error {
			if err := stores.ValidateAll(reqs, out); err != nil {
				return err
			}
			for i := range reqs {
				d, err := inner.Apply(ctx, reqs[i])
				if err != nil {
					return err
				}
				out[i] = d
			}
			return nil
		})
	case "charges-batched-peeks":
		return changeOp(func(r *core.Request) {
			if r.Op == core.OpPeek {
				r.Op = core.OpCharge
			}
		})
	case "reserves-no-debt":
		return changeOp(func(r *core.Request) {
			if r.Op == core.OpReserve {
				*r = r.As(core.OpCharge)
			}
		})
	case "drops-batched-refunds":
		return changeOp(func(r *core.Request) {
			if r.Op == core.OpRefund {
				r.Op = core.OpPeek
			}
		})
	case "drops-batched-leases":
		return changeOp(func(r *core.Request) { r.Lease = 0 })
	case "lets-bad-batches-in":
		// Decides what it can, request by request, of a batch
		// stores.ValidateAll rejects.
		return batch(func(ctx context.Context, reqs []core.Request, out []core.Decision) error {
			if stores.ValidateAll(reqs, out) == nil {
				return inner.ApplyAll(ctx, reqs, out)
			}
			for i := range min(len(reqs), len(out)) {
				out[i], _ = inner.Apply(ctx, reqs[i])
			}
			return nil
		})
	}
	panic("unknown broken store " + broken)
}

// unatomic reads a key's state, decides on a copy and writes it back, with
// the lock released in between: the check-then-act race of real limiters.
type unatomic struct {
	mu     sync.Mutex
	states map[string]core.State
}

func (u *unatomic) Apply(_ context.Context, req core.Request) (core.Decision, error) {
	if err := req.Validate(); err != nil {
		return core.Decision{}, err
	}
	now := time.Now().UnixMicro()
	if req.Limit.IsInf() {
		return core.Run(nil, &req, now), nil
	}
	k := req.Key + "\x00" + req.Algorithm.Name()
	u.mu.Lock()
	s := u.states[k]
	s.Log = slices.Clone(s.Log)
	u.mu.Unlock()
	runtime.Gosched()
	d := core.Run(&s, &req, now)
	if d.Allowed && req.Op != core.OpPeek && req.Cost > 0 {
		u.mu.Lock()
		u.states[k] = s
		u.mu.Unlock()
	}
	return d, nil
}

func (u *unatomic) ApplyAll(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	if err := stores.ValidateAll(reqs, out); err != nil {
		return err
	}
	return stores.ApplyInTurn(ctx, u, reqs, out)
}

func (u *unatomic) Reset(_ context.Context, key string, alg core.Algorithm) error {
	if err := core.ValidateKey(key); err != nil {
		return err
	}
	if alg == nil {
		return core.ErrNoAlgorithm
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.states, key+"\x00"+alg.Name())
	return nil
}

func (u *unatomic) Close() error { return nil }

// flusher's Reset forgets every key, as a FLUSHDB would: it replaces its
// memstore with a new one.
type flusher struct {
	mu    sync.Mutex
	store *memstore.Store
}

func (f *flusher) current() *memstore.Store {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.store
}

func (f *flusher) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	return f.current().Apply(ctx, req)
}

func (f *flusher) ApplyAll(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	return f.current().ApplyAll(ctx, reqs, out)
}

func (f *flusher) Reset(ctx context.Context, key string, alg core.Algorithm) error {
	if err := f.current().Reset(ctx, key, alg); err != nil {
		return err // bad input, or closed
	}
	fresh, err := memstore.New(memstore.Config{})
	if err != nil {
		return err
	}
	f.mu.Lock()
	old := f.store
	f.store = fresh
	f.mu.Unlock()
	return old.Close()
}

func (f *flusher) Close() error { return f.current().Close() }
