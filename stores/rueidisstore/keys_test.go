package rueidisstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/internal/redisengine"
)

// TestBracesCannotPickASlot charges 10,000 keys crafted to share the hash
// tag "same" on the Cluster: they must spread over slots and masters as
// any keys do, instead of landing on one.
func TestBracesCannotPickASlot(t *testing.T) {
	t.Parallel()
	cluster := redistest.SharedCluster(t)
	store := newStore(t, newClient(t, cluster.Addrs()...))
	prefix := store.Prefix()
	const n = 10_000
	slots := map[int]bool{}
	// The keys' slots in 64 bins of 256 slots each, for a χ² test of
	// uniformity.
	const bins = 64
	var binned [bins]int
	for i := range n {
		key := fmt.Sprintf("{same}x%d", i)
		slot := redistest.Slot(redisengine.Key(prefix, key, algorithms.GCRA.Name()))
		slots[slot] = true
		binned[slot*bins/16384]++
		_, err := store.Apply(context.Background(), core.Request{Key: key, Cost: 1, Terms: &core.Terms{Algorithm: algorithms.GCRA, Limit: core.PerMinute(1)}})
		if err != nil {
			t.Fatal(err)
		}
	}
	// 10,000 keys thrown at random into 16,384 slots fill about 7,900.
	if len(slots) < 7_000 {
		t.Errorf("%d keys crafted as {same}x<i> landed in %d slots, want about 7,900", n, len(slots))
	}
	for _, s := range cluster.Servers() {
		keys := scan(t, s, prefix)
		// A third each, give or take; one master holding them all would
		// mean the crafted tag chose the slot.
		if len(keys) < n/4 || len(keys) > n/2 {
			t.Errorf("master %s holds %d of the %d keys, want about a third", s.Addr(), len(keys), n)
		}
	}
	// χ² over 64 bins has 63 degrees of freedom: a uniform spread exceeds
	// 92.0 once in a hundred (p = 0.01; the keys are fixed, so the test is
	// too). CRC16 of keys that differ in a counter spreads them more
	// evenly than chance does, so χ² comes out far lower.
	const expected = float64(n) / bins
	chi2 := 0.0
	for _, c := range binned {
		chi2 += (float64(c) - expected) * (float64(c) - expected) / expected
	}
	if chi2 > 92.0 {
		t.Errorf("the keys' slots are not spread uniformly: χ² = %.1f over %d bins, want at most 92.0 (p > 0.01)", chi2, bins)
	}
	t.Logf("%d keys: %d slots, χ² = %.1f over %d bins", n, len(slots), chi2, bins)
}

// TestEveryKeyHasATTL runs every algorithm over many keys, limits and
// costs on the Cluster and checks that each key written expires, no later
// than its algorithm's horizon plus the second's margin and, for a key
// written again, the second's slack by which it keeps its TTL.
func TestEveryKeyHasATTL(t *testing.T) {
	t.Parallel()
	cluster := redistest.SharedCluster(t)
	store := newStore(t, newClient(t, cluster.Addrs()...))
	limits := []core.Limit{core.PerSecond(5), core.PerMinute(100).WithBurst(10), core.PerHour(3), core.PerDay(1000).WithBurst(2)}
	horizon := map[string]time.Duration{}
	written := map[string]time.Time{} // each key's last write
	for _, alg := range algorithms.All() {
		for i, l := range limits {
			for k := range 20 {
				key := fmt.Sprintf("k%d-%d", i, k)
				for cost := range int64(4) {
					if _, err := store.Apply(context.Background(), core.Request{Key: key, Cost: cost, Terms: &core.Terms{Algorithm: alg, Limit: l}}); err != nil {
						t.Fatal(err)
					}
				}
				horizon[redisengine.Key(store.Prefix(), key, alg.Name())] = alg.Horizon(l)
				written[redisengine.Key(store.Prefix(), key, alg.Name())] = time.Now()
			}
		}
	}
	var checked int
	found := map[string]bool{}
	for _, s := range cluster.Servers() {
		for _, key := range scan(t, s, store.Prefix()) {
			ttl, err := s.Do("PTTL", key)
			if err != nil {
				t.Fatal(err)
			}
			ms, err := ttl.Int()
			if err != nil {
				t.Fatal(err)
			}
			if ms == -2 {
				continue // expired since the scan: checked below as a missing key
			}
			h, ok := horizon[key]
			found[key] = true
			switch {
			case !ok:
				t.Errorf("unexpected key %q", key)
			case ms < 0:
				t.Errorf("key %q has PTTL %d: it never expires", key, ms)
			case time.Duration(ms)*time.Millisecond > h+2*time.Second+time.Millisecond:
				t.Errorf("key %q expires in %dms, beyond its horizon %v, the second's margin and the second's slack", key, ms, h)
			}
			checked++
		}
	}
	// A key may have expired already on a slow machine, but not within
	// the second's margin of its last write: that would be a key written
	// without its TTL's margin, or not written at all.
	var expired int
	for key := range horizon {
		if !found[key] {
			if since := time.Since(written[key]); since < time.Second {
				t.Errorf("key %q is missing %v after its last write", key, since)
			}
			expired++
		}
	}
	t.Logf("checked %d keys; %d had already expired (the machine was slow)", checked, expired)
	if checked == 0 {
		t.Errorf("found none of the %d keys", len(horizon))
	}
}

// scan returns the keys under prefix on one server.
func scan(t *testing.T, s *redistest.Server, prefix string) []string {
	t.Helper()
	var keys []string
	cursor := "0"
	for {
		r, err := s.Do("SCAN", cursor, "MATCH", prefix+"*", "COUNT", "1000")
		if err != nil {
			t.Fatal(err)
		}
		parts, err := r.Array()
		if err != nil || len(parts) != 2 {
			t.Fatalf("SCAN: %v %v", r, err)
		}
		if cursor, err = parts[0].String(); err != nil {
			t.Fatal(err)
		}
		batch, err := parts[1].Strings()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range batch {
			if !strings.HasPrefix(k, prefix) {
				t.Fatalf("SCAN MATCH %s* gave %q", prefix, k)
			}
		}
		keys = append(keys, batch...)
		if cursor == "0" {
			return keys
		}
	}
}
