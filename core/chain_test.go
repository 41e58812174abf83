package core_test

import (
	"slices"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores"
)

// loop is a decorator that unwraps to itself, or to nothing.
type loop struct {
	core.Store
	self bool
}

func (l *loop) Unwrap() core.Store {
	if l.self {
		return l
	}
	return nil
}

func TestChain(t *testing.T) {
	t.Parallel()
	backend := stores.Func(nil)
	outer := &tally{Store: &tally{Store: backend}}
	if got := slices.Collect(core.Chain(outer)); len(got) != 3 || got[0] != core.Store(outer) || got[1] != outer.Store {
		t.Errorf("Chain = %v, want the two decorators and the backend", got)
	}
	if got := slices.Collect(core.Chain(nil)); len(got) != 0 {
		t.Errorf("Chain(nil) = %v, want nothing", got)
	}
	if got := slices.Collect(core.Chain(&loop{})); len(got) != 1 {
		t.Errorf("a decorator that unwraps to nil: %d stores, want 1", len(got))
	}
	if got := slices.Collect(core.Chain(&loop{self: true})); len(got) != 64 {
		t.Errorf("a decorator that unwraps to itself: %d stores, want the walk cut at 64", len(got))
	}
	for range core.Chain(outer) {
		break // stopping early is allowed
	}
}
