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
	storetest.Run(t, func(t *testing.T) core.Store {
		inner, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { inner.Close() })
		return breakStore(broken, inner)
	})
}

func breakStore(broken string, inner *memstore.Store) core.Store {
	switch broken {
	case "charges-peeks":
		return core.StoreFunc(func(ctx context.Context, req core.Request) (core.Decision, error) {
			req.Peek = false
			return inner.Apply(ctx, req)
		})
	case "ignores-now":
		return core.StoreFunc(func(ctx context.Context, req core.Request) (core.Decision, error) {
			req.Now = time.Time{}
			return inner.Apply(ctx, req)
		})
	case "swallows-errors":
		return core.StoreFunc(func(ctx context.Context, req core.Request) (core.Decision, error) {
			d, err := inner.Apply(ctx, req)
			if err != nil {
				return core.Decision{Allowed: true}, nil
			}
			return d, nil
		})
	case "short-keys":
		return core.StoreFunc(func(ctx context.Context, req core.Request) (core.Decision, error) {
			req.Key = req.Key[:min(len(req.Key), 16)]
			return inner.Apply(ctx, req)
		})
	case "remaining-off-by-one":
		return core.StoreFunc(func(ctx context.Context, req core.Request) (core.Decision, error) {
			d, err := inner.Apply(ctx, req)
			if d.Remaining > 0 {
				d.Remaining++
			}
			return d, err
		})
	case "read-modify-write":
		return &unatomic{states: make(map[string]core.State)}
	case "resets-everything":
		return &flusher{Store: inner}
	case "frozen-clock":
		return core.StoreFunc(func(ctx context.Context, req core.Request) (core.Decision, error) {
			if req.Now.IsZero() {
				req.Now = storetest.T0
			}
			return inner.Apply(ctx, req)
		})
	case "truncates-long-keys":
		return core.StoreFunc(func(ctx context.Context, req core.Request) (core.Decision, error) {
			req.Key = req.Key[:min(len(req.Key), 1000)]
			return inner.Apply(ctx, req)
		})
	case "fails-open":
		return core.StoreFunc(func(ctx context.Context, req core.Request) (core.Decision, error) {
			d, err := inner.Apply(ctx, req)
			d.Source = core.SourceFailOpen
			return d, err
		})
	case "admits-huge-costs":
		return core.StoreFunc(func(ctx context.Context, req core.Request) (core.Decision, error) {
			if req.Cost > 1<<30 {
				return core.Decision{Allowed: true}, nil
			}
			return inner.Apply(ctx, req)
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
	if req.Limit.IsInf() {
		return core.Unlimited(), nil
	}
	now := time.Now()
	if !req.Now.IsZero() {
		now = req.Now
	}
	k := req.Key + "\x00" + req.Algorithm.Name()
	u.mu.Lock()
	s := u.states[k]
	s.Log = slices.Clone(s.Log)
	u.mu.Unlock()
	runtime.Gosched()
	d := req.Algorithm.Transition(&s, req.Step(now.UnixMicro()))
	if d.Allowed && !req.Peek && req.Cost > 0 {
		u.mu.Lock()
		u.states[k] = s
		u.mu.Unlock()
	}
	return d, nil
}

// flusher's Reset forgets every key, as a FLUSHDB would.
type flusher struct {
	mu sync.Mutex
	*memstore.Store
}

func (f *flusher) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	f.mu.Lock()
	s := f.Store
	f.mu.Unlock()
	return s.Apply(ctx, req)
}

func (f *flusher) Reset(context.Context, string, core.Algorithm) error {
	fresh, err := memstore.New(memstore.Config{})
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.Store = fresh
	f.mu.Unlock()
	return nil
}
