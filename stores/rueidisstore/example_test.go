package rueidisstore_test

import (
	"context"
	"fmt"
	"log"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/rueidisstore"
)

// A limit shared by every instance of a service: GCRA at 10 requests a
// minute in bursts of 3, decided in Redis.
func Example() {
	addr, err := redistest.SharedAddr() // a Redis server of the test's own
	if err != nil {
		log.Fatal(err)
	}
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	store, err := rueidisstore.New(client, rueidisstore.Config{Prefix: "example:"})
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := sluice.NewLimiter(store, algorithms.GCRA, sluice.PerMinute(10).WithBurst(3))
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

// rueidis finds out by itself that its addresses are a Redis Cluster's,
// and the store decides on it as on one server. Each user's state lives in
// the slot of the user's key, its hash tag: each user's decisions go to
// one slot, and different users spread over the slots and the masters
// that serve them.
func Example_cluster() {
	// Your cluster's addresses: one reachable master is enough, the
	// client finds the others. Here, a 3-master cluster of the test's own.
	addrs, err := redistest.SharedClusterAddrs()
	if err != nil {
		log.Fatal(err)
	}
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	fmt.Println("cluster:", client.Mode() == rueidis.ClientModeCluster)

	store, err := rueidisstore.New(client, rueidisstore.Config{Prefix: "example:"})
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := sluice.NewLimiter(store, algorithms.GCRA, sluice.PerMinute(10).WithBurst(2))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for _, user := range []string{"user:1", "user:2", "user:3"} {
		defer limiter.Reset(ctx, user)
		var allowed []bool
		for range 3 {
			d, err := limiter.Allow(ctx, user)
			if err != nil {
				log.Fatal(err) // Redis failed; a denial is not an error
			}
			allowed = append(allowed, d.Allowed)
		}
		key := "example:{" + user + "}:gcra"
		slot, err := client.Do(ctx, client.B().ClusterKeyslot().Key(key).Build()).AsInt64()
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(user, allowed, key, "in slot", slot)
	}
	// Output:
	// cluster: true
	// user:1 [true true false] example:{user:1}:gcra in slot 10778
	// user:2 [true true false] example:{user:2}:gcra in slot 6777
	// user:3 [true true false] example:{user:3}:gcra in slot 2648
}

// A client for a store behind a breaker dials with Dial: a server that
// accepts connections and never answers fails the dial by the caller's
// deadline, instead of holding rueidis's callers for a second.
func ExampleDial() {
	addr, err := redistest.SharedAddr() // a Redis server of the test's own
	if err != nil {
		log.Fatal(err)
	}
	client, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:  []string{addr},
		DisableCache: true,
		DialCtxFn:    rueidisstore.Dial,
		// and the other options of docs/redis.md's "Client options"
	})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	store, err := rueidisstore.New(client, rueidisstore.Config{Prefix: "example-dial:"})
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := sluice.NewLimiter(store, algorithms.TokenBucket, sluice.PerSecond(5))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	defer limiter.Reset(ctx, "user:7")
	d, err := limiter.Allow(ctx, "user:7")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(d.Allowed, d.Remaining)
	// Output: true 4
}
