package redistest

import (
	"slices"
	"strings"
	"testing"
)

// TestSharedAddrs checks that the address functions for code without a
// testing.TB name the very servers Shared and SharedCluster return, and
// that those servers answer.
func TestSharedAddrs(t *testing.T) {
	t.Parallel()
	addr, err := SharedAddr()
	if err != nil {
		t.Fatal(err)
	}
	if want := Shared(t).Addr(); addr != want {
		t.Errorf("SharedAddr() = %q, Shared(t).Addr() = %q", addr, want)
	}

	addrs, err := SharedClusterAddrs()
	if err != nil {
		t.Fatal(err)
	}
	c := SharedCluster(t)
	if want := c.Addrs(); !slices.Equal(addrs, want) {
		t.Errorf("SharedClusterAddrs() = %q, SharedCluster(t).Addrs() = %q", addrs, want)
	}
	if len(addrs) != clusterMasters {
		t.Fatalf("SharedClusterAddrs() = %q, want %d addresses", addrs, clusterMasters)
	}
	again, err := SharedClusterAddrs()
	if err != nil || !slices.Equal(again, addrs) {
		t.Errorf("second SharedClusterAddrs() = %q, %v; want %q", again, err, addrs)
	}
	for _, s := range c.Servers() {
		if got := infoField(doString(t, s, "CLUSTER", "INFO"), "cluster_state"); got != "ok" {
			t.Errorf("%s: cluster_state:%s", s.Addr(), got)
		}
	}
}

// TestSharedAddrsWithoutMain checks that the address functions refuse to
// start a server when no TestMain would stop it. It is not parallel: it
// clears the flag Main set, which no other test may see cleared.
func TestSharedAddrsWithoutMain(t *testing.T) {
	mainRunning.Store(false)
	defer mainRunning.Store(true)
	if addr, err := SharedAddr(); err == nil || !strings.Contains(err.Error(), "redistest.Main(m)") {
		t.Errorf("SharedAddr() without Main = %q, %v; want an error naming redistest.Main(m)", addr, err)
	}
	if addrs, err := SharedClusterAddrs(); err == nil || !strings.Contains(err.Error(), "redistest.Main(m)") {
		t.Errorf("SharedClusterAddrs() without Main = %q, %v; want an error naming redistest.Main(m)", addrs, err)
	}
}
