package leakcheck_test

import (
	"fmt"

	"github.com/sluicehq/sluice/internal/leakcheck"
	"github.com/sluicehq/sluice/stores/memstore"
)

// Example runs the check [leakcheck.Main] runs after a package's tests:
// a store closed before it leaves no goroutine behind. (A store left
// open would be reported, its sweeper's stack in the error.)
func Example() {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		panic(err)
	}
	store.Close() // stops the sweeper, and waits for it
	fmt.Println(leakcheck.Check())
	// Output: <nil>
}
