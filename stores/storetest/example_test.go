package storetest_test

import (
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores/memstore"
	"github.com/sluicehq/sluice/stores/storetest"
)

// Run the suite from a test of your own store's package; this is how
// memstore runs it.
func ExampleRun() {
	var t *testing.T // your test's *testing.T
	storetest.Run(t, func(t *testing.T) core.Store {
		s, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
