package redistest_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/redistest"
)

// A package whose tests share a server hands its TestMain to Main, which
// stops the shared servers after the tests:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
//
// Each test then takes the shared server and keeps to keys of its own.
func ExampleShared() {
	var t *testing.T // the test's *testing.T
	s := redistest.Shared(t)
	key := t.Name() + ":hits" // a prefix of the test's own: never FLUSHALL
	if _, err := s.Do("INCR", key); err != nil {
		t.Fatal(err)
	}
	n, err := s.Do("GET", key)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("hits = %v", n)
}

// A fault test starts a server of its own, which it may kill and restart.
func ExampleServer_Restart() {
	var t *testing.T // the test's *testing.T
	s := redistest.Start(t, redistest.WithArgs("--maxmemory", "10mb"))
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Do("PING"); err == nil {
		t.Fatal("PING to a killed server succeeded")
	}
	if err := s.Restart(); err != nil { // same port, no keys
		t.Fatal(err)
	}
}

// Commands for a key go to the node that owns its slot.
func ExampleCluster_Owner() {
	var t *testing.T // the test's *testing.T
	c := redistest.SharedCluster(t)
	key := "{" + t.Name() + "}:tokens"
	node, err := c.Owner(key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := node.Do("SET", key, "10"); err != nil {
		t.Fatal(err)
	}
}

// A client pointed at a proxy meets the faults the test sets: a
// blackholed server times its calls out, and a healed one answers again.
func ExampleProxy() {
	var t *testing.T // the test's *testing.T
	s := redistest.Start(t)
	p := redistest.NewProxy(t, s.Addr())
	client := redis.NewClient(&redis.Options{
		Addr:        p.Addr(), // the proxy's, not the server's
		ReadTimeout: 100 * time.Millisecond,
		MaxRetries:  -1,
	})
	defer client.Close()
	ctx := context.Background()

	p.Blackhole() // the proxy accepts and reads, and forwards nothing
	err := client.Ping(ctx).Err()
	if netErr, ok := errors.AsType[net.Error](err); !ok || !netErr.Timeout() {
		t.Fatalf("PING during the blackhole: %v, want a timeout", err)
	}
	p.Pass() // forwards again, and delivers what it held
	if err := client.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
}

// A delay holds each of the server's replies, so that a round trip
// takes longer than a client's read timeout; requests still reach the
// server at once.
func ExampleProxy_Delay() {
	var t *testing.T // the test's *testing.T
	p := redistest.NewProxy(t, redistest.Start(t).Addr())
	client := redis.NewClient(&redis.Options{
		Addr:        p.Addr(),
		ReadTimeout: 100 * time.Millisecond,
		MaxRetries:  -1,
	})
	defer client.Close()
	ctx := context.Background()
	if err := client.Ping(ctx).Err(); err != nil { // connect before the delay
		t.Fatal(err)
	}

	p.Delay(300 * time.Millisecond)
	if err := client.Set(ctx, "k", "v", 0).Err(); err == nil {
		t.Fatal("SET answered within the read timeout despite the delay")
	}
	p.Delay(0) // or p.Pass()
	if got, err := client.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET k = %q, %v; want the SET that timed out to have been applied", got, err)
	}
}

// A Sentinel set gives a failover client the two things it asks for:
// the name under which the sentinels monitor the primary, and their
// addresses. Killing the primary then tests what the client does in a
// failover.
func ExampleStartSentinel() {
	var t *testing.T // the test's *testing.T
	set := redistest.StartSentinel(t)
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    set.MasterName(),
		SentinelAddrs: set.SentinelAddrs(),
	})
	defer client.Close()
	ctx := context.Background()
	if err := client.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}

	if err := set.KillPrimary(); err != nil {
		t.Fatal(err)
	}
	promoted, err := set.WaitFailover(15 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// The client asks the sentinels again and writes to the promoted
	// replica. A write it made just before the kill may be lost: Redis
	// replicates asynchronously.
	if err := client.Set(ctx, "k", "v2", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r, err := promoted.Do("GET", "k")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := r.String(); got != "v2" {
		t.Errorf("GET k on the promoted replica = %v, want the client's write", r)
	}
}

// A server with a TLS port, whose certificate a CA of the test's own
// signed; the client trusts that CA alone.
func ExampleWithTLS() {
	var t *testing.T // the test's *testing.T
	ca := redistest.NewCA(t, "test CA")
	s := redistest.Start(t, redistest.WithTLS(ca))
	client := redis.NewClient(&redis.Options{
		Addr:      s.TLSAddr(), // not s.Addr(), the plain port
		TLSConfig: ca.ClientConfig(),
	})
	defer client.Close()
	if err := client.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
}

// A server that requires a client certificate takes one the same CA
// signed, in the client's TLS configuration.
func ExampleWithClientAuth() {
	var t *testing.T // the test's *testing.T
	ca := redistest.NewCA(t, "test CA")
	s := redistest.Start(t, redistest.WithTLS(ca), redistest.WithClientAuth())
	cfg := ca.ClientConfig()
	cfg.Certificates = []tls.Certificate{ca.ClientCertificate(t, "client")}
	client := redis.NewClient(&redis.Options{Addr: s.TLSAddr(), TLSConfig: cfg})
	defer client.Close()
	if err := client.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
}

func ExampleSlot() {
	fmt.Println(redistest.Slot("foo"))
	fmt.Println(redistest.Slot("{user1000}.following") == redistest.Slot("{user1000}.followers"))
	fmt.Println(redistest.Slot("foo{}{bar}") == redistest.Slot("foo{}{bar}x")) // an empty tag hashes the whole key
	// Output:
	// 12182
	// true
	// false
}

// A test moves the lowest 16 slots of one master to another, as
// redis-cli --cluster reshard moves them for an operator, while its
// clients run: they meet ASK, MOVED and TRYAGAIN, and find every key on
// the new master afterwards.
func ExampleCluster_Reshard() {
	var t *testing.T // the test's *testing.T
	c := redistest.StartCluster(t)
	nodes := c.Servers()
	// ... start the load on keys in the first master's lowest slots ...
	if err := c.Reshard(nodes[0], nodes[1], 16, 1); err != nil {
		t.Fatal(err)
	}
}
