package redisengine_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores/redisstore"
	"github.com/sluicehq/sluice/stores/rueidisstore"
)

// store is a Redis store of either client, as the tests of both use it.
type store interface {
	core.Store
	Key(key string, alg core.Algorithm) string
	Prefix() string
}

// clients are the two Redis stores: each test of behaviour both share runs
// on each.
var clients = []struct {
	name string
	// open returns a store on the server at addr, with a prefix of its
	// own, closed with its client when the test ends.
	open func(t testing.TB, addr string) store
}{
	{"go-redis", func(t testing.TB, addr string) store {
		client := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { client.Close() })
		s, err := redisstore.New(client, redisstore.Config{Prefix: nextPrefix()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}},
	{"rueidis", func(t testing.TB, addr string) store {
		// ForceSingleClient: miniredis answers CLUSTER SLOTS, and rueidis would
		// take it for a Cluster.
		client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(client.Close)
		s, err := rueidisstore.New(client, rueidisstore.Config{Prefix: nextPrefix()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}},
}

var prefixes atomic.Int64

// nextPrefix returns a prefix no other store of the test binary has.
func nextPrefix() string { return fmt.Sprintf("t%d:", prefixes.Add(1)) }
