package casstore_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores/casstore"
)

func TestWrap(t *testing.T) {
	t.Parallel()
	down, other := errors.New("down"), errors.New("other")
	isDown := func(err error) bool { return errors.Is(err, down) }
	for _, c := range []struct {
		err         error
		msg         string
		unavailable bool
	}{
		{down, "db: deciding: " + core.ErrUnavailable.Error() + ": down", true},
		{other, "db: deciding: other", false},
	} {
		got := casstore.Wrap("db", "deciding", c.err, isDown)
		if got.Error() != c.msg || !errors.Is(got, c.err) || errors.Is(got, core.ErrUnavailable) != c.unavailable {
			t.Errorf("Wrap(db, deciding, %v) = %q (ErrUnavailable: %v), want %q (%v), wrapping the error",
				c.err, got, errors.Is(got, core.ErrUnavailable), c.msg, c.unavailable)
		}
	}
}

func TestSetup(t *testing.T) {
	t.Parallel()
	var s casstore.Setup
	calls := 0
	fail := errors.New("no table")
	steps := []struct {
		f     error // what the setup returns, if run
		want  error
		calls int
	}{
		{fail, fail, 1},
		{nil, nil, 2},
		{fail, nil, 2}, // done: not run again
	}
	for i, st := range steps {
		err := s.Do(func() error { calls++; return st.f })
		if err != st.want || calls != st.calls {
			t.Errorf("step %d: Do = %v after %d setups, want %v after %d", i, err, calls, st.want, st.calls)
		}
	}
}

func TestSetupConcurrentSafe(t *testing.T) {
	t.Parallel()
	var s casstore.Setup
	var mu sync.Mutex
	calls := 0
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			s.Do(func() error {
				mu.Lock()
				defer mu.Unlock()
				calls++
				return nil
			})
		})
	}
	wg.Wait()
	if calls != 1 {
		t.Errorf("32 concurrent Do ran the setup %d times, want 1", calls)
	}
}
