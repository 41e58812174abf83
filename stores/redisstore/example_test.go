package redisstore_test

import (
	"context"
	"fmt"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
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
	limiter, err := sluice.NewLimiter(store, algorithms.GCRA, core.PerMinute(10).WithBurst(3))
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

// On a Redis Cluster the store takes a ClusterClient (or any
// redis.UniversalClient) and decides as it does on one server. The user's
// key is the hash tag of every key the store writes for it, so a stack
// whose rules all limit one user keeps their states in one slot and is
// decided in one script call, all or nothing.
func Example_cluster() {
	// Your cluster's addresses: one reachable master is enough, the
	// client finds the others. Here, a 3-master cluster of the test's own.
	addrs, err := redistest.SharedClusterAddrs()
	if err != nil {
		log.Fatal(err)
	}
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRetries: -1})
	defer client.Close()

	store, err := redisstore.New(client, redisstore.Config{Prefix: "example:"})
	if err != nil {
		log.Fatal(err)
	}
	burst := sluice.Rule{Name: "burst", Algorithm: algorithms.GCRA, Limit: core.PerMinute(1).WithBurst(2)}
	daily := sluice.Rule{Name: "daily", Algorithm: algorithms.TokenBucket, Limit: core.PerDay(100)}
	stack, err := sluice.NewStack(store, burst, daily)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for _, r := range stack.Rules() {
		defer store.Reset(ctx, "user:42", core.Named(r.Algorithm, r.Name)) // a rule's state is under its name
	}
	for range 3 {
		v, err := stack.Allow(ctx, "user:42", "user:42") // one key per rule
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(v.Allowed, stack.Rules()[v.Binding].Name)
	}

	// The denial charged neither rule: the daily quota paid for the two
	// admissions only, so a peek finds that one more request would leave
	// 97 of its 100.
	quota, err := sluice.NewLimiter(store, core.Named(daily.Algorithm, daily.Name), daily.Limit)
	if err != nil {
		log.Fatal(err)
	}
	d, err := quota.Peek(ctx, "user:42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("daily quota after one more:", d.Remaining)

	// Both states are in the slot of the hash tag {user:42}.
	for _, key := range []string{"example:{user:42}:gcra/burst", "example:{user:42}:token-bucket/daily"} {
		slot, err := client.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(key, slot)
	}
	// Output:
	// true burst
	// true burst
	// false burst
	// daily quota after one more: 97
	// example:{user:42}:gcra/burst 15880
	// example:{user:42}:token-bucket/daily 15880
}
