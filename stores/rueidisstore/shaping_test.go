package rueidisstore_test

import (
	"testing"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redisfaults"
)

// TestShaping runs the shaping scenario (redisfaults.CheckShaping)
// through rueidis: the queue is the key's debt in Redis, bounded in the
// script.
func TestShaping(t *testing.T) {
	store := newStore(t, newClient(t, testAddr(t)))
	for _, alg := range []core.Algorithm{algorithms.GCRA, algorithms.TokenBucket} {
		t.Run(alg.Name(), func(t *testing.T) { redisfaults.CheckShaping(t, store, alg) })
	}
}
