package classifytest

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redisfaults"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/stores/memstore"
)

// Guard is package policy's breaker in front of remote, in the mode named
// mode (policy.Mode's String) with a per-call deadline of timeout: the
// redisfaults.Guard both Redis stores' tests give
// redisfaults.CheckSentinelFailover, which cannot import policy itself
// (policy's own tests import redisfaults). The test's cleanup closes it.
func Guard(t testing.TB, remote core.Store, mode string, timeout time.Duration) redisfaults.Breaker {
	t.Helper()
	for _, m := range []policy.Mode{policy.FailOpen, policy.FailClosed, policy.Degrade} {
		if m.String() != mode {
			continue
		}
		local, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := policy.NewBreaker(remote, policy.WithMode(m), policy.WithLocal(local), policy.WithTimeout(timeout))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	t.Fatalf("classifytest: no breaker mode %q", mode)
	return nil
}
