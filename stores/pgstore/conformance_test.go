package pgstore_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/dbfaults"
	"github.com/sluicehq/sluice/stores/pgstore/pgtest"
	"github.com/sluicehq/sluice/stores/storetest"
)

// TestConformance runs the conformance suite on the store, every subtest
// on a table of its own in one server.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, store(newPool(t, pgtest.Start(t))))
}

// TestConformanceThroughChain runs the conformance suite on the
// production chain over the store (dbfaults.ConformanceThroughChain).
func TestConformanceThroughChain(t *testing.T) {
	t.Parallel()
	dbfaults.ConformanceThroughChain(t, store(newPool(t, pgtest.Start(t))))
}
