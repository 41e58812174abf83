package redistest_test

import (
	"fmt"
	"testing"

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

func ExampleSlot() {
	fmt.Println(redistest.Slot("foo"))
	fmt.Println(redistest.Slot("{user1000}.following") == redistest.Slot("{user1000}.followers"))
	fmt.Println(redistest.Slot("foo{}{bar}") == redistest.Slot("foo{}{bar}x")) // an empty tag hashes the whole key
	// Output:
	// 12182
	// true
	// false
}
