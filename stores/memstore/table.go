package memstore

import "math/bits"

// table holds one algorithm's states in a shard: an open-addressing hash
// table whose slots are the entries themselves, found by the key's 64-bit
// hash, the same hash that chose the shard, so that a decision hashes its
// key once. Slots are probed linearly from the one the hash's top bits
// choose (its low bits chose the shard), comparing each slot's key words
// with the key's; a removal shifts the entries after it back, so no slot
// is ever a tombstone and a probe ends at the first free slot. The table
// is at most three quarters full.
//
// An entry moves when the table grows and when an entry before it is
// removed: a pointer to one is good only until the next add or removal.
type table struct {
	alg   string
	slots []entry // a power of two of them, or none before the first add
	n     int     // entries
	shift uint8   // 64 − log2(len(slots)): a hash's top bits choose its first slot
}

// minSlots is a table's size at its first add.
const minSlots = 8

// home returns the slot where the probe for hash h starts.
func (t *table) home(h uint64) int { return int(h >> t.shift) }

// find returns the entry of key, whose hash is h and words w; nil if the
// table has none.
func (t *table) find(h uint64, w keyWords, key string) *entry {
	if i := t.index(h, w, key); i >= 0 {
		return &t.slots[i]
	}
	return nil
}

// index returns the slot of key's entry, whose hash is h and words w; -1
// if the table has none.
func (t *table) index(h uint64, w keyWords, key string) int {
	if t.n == 0 {
		return -1
	}
	mask := len(t.slots) - 1
	for i := t.home(h); ; i = (i + 1) & mask {
		e := &t.slots[i]
		switch {
		case e.free():
			return -1
		case e.is(w, key):
			return i
		}
	}
}

// add returns a free slot for a key whose hash is h, not in the table,
// growing the table if it is full; the caller sets the key (see
// [entry.setKey]). hash returns the hash of the key of an entry, for the
// entries that move.
func (t *table) add(h uint64, hash func(keyWords) uint64) *entry {
	if 4*(t.n+1) > 3*len(t.slots) {
		t.resize(max(minSlots, 2*len(t.slots)), hash)
	}
	t.n++
	return t.free(h)
}

// free returns the first free slot from h's home.
func (t *table) free(h uint64) *entry {
	mask := len(t.slots) - 1
	i := t.home(h)
	for !t.slots[i].free() {
		i = (i + 1) & mask
	}
	return &t.slots[i]
}

// resize moves the entries to a table of n slots, n a power of two.
func (t *table) resize(n int, hash func(keyWords) uint64) {
	old := t.slots
	t.slots = make([]entry, n)
	t.shift = uint8(64 - bits.TrailingZeros(uint(n)))
	for i := range old {
		if !old[i].free() {
			*t.free(hash(old[i].key)) = old[i]
		}
	}
}

// removeAt empties slot i, then moves back each entry after it that
// would not be found past the free slot: the first entry whose probe
// starts at or before the hole fills it, leaving a hole where it was,
// until a free slot ends the run.
func (t *table) removeAt(i int, hash func(keyWords) uint64) {
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; !t.slots[j].free(); j = (j + 1) & mask {
		// Entry j may fill hole i if its probe passed i on the way to
		// j: its home is no further from j than i is.
		if (j-t.home(hash(t.slots[j].key)))&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = entry{}
	t.n--
}
