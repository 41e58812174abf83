package dbfaults_test

import (
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/dbfaults"
)

// A database store's tests hand the helpers a server of the test's own
// and a way to open a store on it.
func ExampleKillRestart() {
	var t *testing.T               // the test's *testing.T
	var srv dbfaults.Server        // a server of the test's own, such as pgtest.Start(t)
	var newStore func() core.Store // a store on srv
	for _, mode := range dbfaults.Modes {
		t.Run(mode.String(), func(t *testing.T) {
			dbfaults.KillRestart(t, srv, newStore(), mode)
		})
	}
}
