package memstore

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestTableMatchesMap drives a table and a map with the same random adds,
// removals (by key and by slot, as the sweep and eviction remove) and
// lookups, with hashes drawn from a few values so that runs of slots form
// and wrap around the end of the table. After every step each key must
// be found with its own state, where the map says.
func TestTableMatchesMap(t *testing.T) {
	if size := unsafe.Sizeof(entry{}); size != 64 {
		t.Errorf("an entry is %d bytes, want 64 (a cache line)", size)
	}
	for _, hashes := range []uint64{1, 3, 64, 1 << 20} {
		t.Run(fmt.Sprint(hashes, " hashes"), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(hashes, 7))
			hashOf := func(key string) uint64 {
				// Spread the few hashes over the top bits, which choose
				// the slot.
				var h uint64
				for _, c := range []byte(key) {
					h = h*31 + uint64(c)
				}
				return (h % hashes) * 0x9e3779b97f4a7c15
			}
			rehash := func(w keyWords) uint64 {
				b := w.bytes()
				return hashOf(string(b[:b[15]]))
			}
			var tab table
			want := map[string]int64{} // each key's Vals[0], unique
			keys := make([]string, 200)
			for i := range keys {
				keys[i] = fmt.Sprint("k", i)
			}
			next := int64(1)
			for step := range 20_000 {
				key := keys[rng.IntN(len(keys))]
				h, w := hashOf(key), wordsOf(key, hashOf(key))
				switch op := rng.IntN(10); {
				case op < 5:
					if want[key] == 0 {
						e := tab.add(h, rehash)
						e.setKey(w, key)
						e.vals[0] = next
						want[key] = next
						next++
					}
				case op < 7:
					if i := tab.index(h, w, key); i >= 0 {
						tab.removeAt(i, rehash)
						delete(want, key)
					}
				case op < 8 && tab.n > 0:
					// Remove whatever a random slot holds, as a sweep or
					// an eviction does.
					i := rng.IntN(len(tab.slots))
					for tab.slots[i].free() {
						i = (i + 1) % len(tab.slots)
					}
					b := tab.slots[i].key.bytes()
					delete(want, string(b[:b[15]]))
					tab.removeAt(i, rehash)
				}
				if tab.n != len(want) {
					t.Fatalf("step %d: the table counts %d entries, the map holds %d", step, tab.n, len(want))
				}
				for _, k := range keys {
					e := tab.find(hashOf(k), wordsOf(k, hashOf(k)), k)
					switch {
					case e == nil && want[k] != 0:
						t.Fatalf("step %d: %s is not found", step, k)
					case e != nil && e.vals[0] != want[k]:
						t.Fatalf("step %d: %s is found with state %d, want %d", step, k, e.vals[0], want[k])
					}
				}
				if len(tab.slots) > 0 && 4*tab.n > 3*len(tab.slots) {
					t.Fatalf("step %d: %d entries in %d slots, more than three quarters", step, tab.n, len(tab.slots))
				}
			}
		})
	}
}

// TestSweepVisitsMovedEntries fills a table whose entries all share one
// home, so that each removal moves the rest back, and expires every
// other one: the sweep must remove exactly the expired ones, including
// those moved into a slot it had just freed.
func TestSweepVisitsMovedEntries(t *testing.T) {
	s, err := New(Config{Shards: 1, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.collide = 0 // every key's hash, and so its home, is 0
	sh := &s.shards[0]
	tab := sh.table("alg", true)
	now := s.now()
	for i := range 40 {
		key := fmt.Sprint("k", i)
		e := tab.add(0, s.rehash)
		e.setKey(wordsOf(key, 0), key)
		e.expiresMicros = (now + 1e12) / 1e3
		if i%2 == 0 {
			e.expiresMicros = 1
		}
		sh.keys++
	}
	s.Sweep()
	if tab.n != 20 || sh.keys != 20 || sh.expired != 20 {
		t.Fatalf("after the sweep: %d entries, %d keys, %d expired; want 20, 20, 20", tab.n, sh.keys, sh.expired)
	}
	for i := range 40 {
		key := fmt.Sprint("k", i)
		e := tab.find(0, wordsOf(key, 0), key)
		if (e != nil) != (i%2 == 1) {
			t.Fatalf("k%d: found %v, want %v", i, e != nil, i%2 == 1)
		}
	}
}

// TestRehashMatchesHash checks that the hash an entry's key words give
// back is the hash its key was found by, for inline and long keys.
func TestRehashMatchesHash(t *testing.T) {
	s, err := New(Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for n := 1; n <= 3*inlineKey; n++ {
		key := string(make([]byte, n)) + "x"
		h := s.hash(key)
		if got := s.rehash(wordsOf(key, h)); got != h {
			t.Errorf("a %d-byte key: rehash %x, hash %x", len(key), got, h)
		}
	}
}
