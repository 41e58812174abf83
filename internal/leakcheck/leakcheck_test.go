package leakcheck_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/leakcheck"
	"github.com/sluicehq/sluice/stores/memstore"
)

// TestCheck leaves a memory store open, whose sweeper goroutine Check
// must report, then closes it, after which Check must pass.
func TestCheck(t *testing.T) {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			store.Close()
		}
	}()
	if err := leakcheck.Check(); err == nil || !strings.Contains(err.Error(), "memstore.(*Store).sweep") {
		t.Fatalf("Check with a store open = %v; want its sweeper reported", err)
	}
	store.Close()
	closed = true
	if err := leakcheck.Check(); err != nil {
		t.Fatalf("Check after Close = %v; want nil", err)
	}
}
