package classifytest_test

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/internal/classifytest"
	"github.com/sluicehq/sluice/stores/memstore"
)

// ExampleRequest decides the request every row makes on a store that is
// up: a token bucket of 10 a second admits it, where a failing store
// answers it with the error the row classifies.
func ExampleRequest() {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	req := classifytest.Request("classify:example")
	d, err := store.Apply(context.Background(), req)
	fmt.Println(req.Algorithm.Name(), d.Allowed, d.Remaining, err)
	// Output: token-bucket true 9 <nil>
}
