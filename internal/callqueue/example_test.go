package callqueue_test

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/internal/callqueue"
)

// A store's send function answers every call of a batch; each caller then
// reads its own result.
func Example() {
	type lookup struct {
		key    string
		answer int
	}
	q := &callqueue.Queue{Send: func(batch []*callqueue.Call) {
		for _, c := range batch {
			l := c.Item.(*lookup)
			l.answer = len(l.key) // one round trip would answer them all
		}
	}}
	defer q.Close()
	l := &lookup{key: "user:42"}
	if err := q.Do(context.Background(), &callqueue.Call{Item: l}); err != nil {
		fmt.Println(err)
	}
	fmt.Println(l.answer)
	// Output: 7
}
