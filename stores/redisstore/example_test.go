package redisstore_test

import (
	"context"
	"fmt"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/stores/redisstore"
)

// A limit shared by every instance of a service: GCRA at 10 requests a
// minute in bursts of 3, decided in Redis.
func Example() {
	addr, err := redistest.SharedAddr() // a Redis server of the test's own
	if err != nil {
		log.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer client.Close()

	store, err := redisstore.New(client, redisstore.Config{Prefix: "example:"})
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := core.NewLimiter(store, algorithms.GCRA, core.PerMinute(10).WithBurst(3))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	defer limiter.Reset(ctx, "user:42")
	for range 4 {
		d, err := limiter.Allow(ctx, "user:42")
		if err != nil {
			log.Fatal(err) // Redis failed; a denial is not an error
		}
		fmt.Println(d.Allowed, d.Remaining)
	}
	// Output:
	// true 2
	// true 1
	// true 0
	// false 0
}
