package memstore

import (
	"encoding/binary"
	"strings"

	"github.com/sluicehq/sluice/core"
)

// inlineKey is the longest key an entry holds in itself; longer keys are
// cloned beside it, in the entry's more.
const inlineKey = 15

// entry is one key's state, kept in a slot of its table: 64 bytes, one
// cache line, so that a decision on a key the caches do not hold waits
// for one miss. It holds a [core.State]'s numbers (the algorithms run on
// a copy, see [entry.load]) and the key; what most keys never need, the
// sliding window log's charges, a long key and an expiry other than
// Expires, is in more.
//
// An entry used to be 128 bytes on the heap, found through a table of
// pointers: two misses a decision, one after the other. On 100,000
// random keys (BenchmarkMemory's random100k, 2 CPUs) this took a
// decision from about 90 ns to 78 with 16 to 256 goroutines, and from
// 181 to 148 ns with one.
type entry struct {
	last          int64    // the state's Last
	vals          [3]int64 // its Vals
	expiresMicros int64    // its Expires
	key           keyWords
	more          *more // nil unless needed
}

// fresh is the entry of a key the store does not hold: its state is a
// fresh key's. It is only read.
var fresh entry

// keyWords is a key as two words compared at once: a key of up to
// inlineKey bytes itself, its length in the last byte; a longer key's
// hash and length, 0xff in the last byte, the key itself being in more.
// A free slot's words are zero: every key is at least one byte long.
//
// It is a struct rather than an array so that the compiler keeps it in
// registers: an array of two words was stored a word at a time and
// copied 16 bytes at a time, and the copy waited for the stores to reach
// the cache, about 6 ns of a 45 ns decision on a hot key.
type keyWords struct{ lo, hi uint64 }

// longKey marks the keyWords of a key longer than inlineKey.
const longKey = 0xff << 56

// wordsOf returns key's keyWords, h being its hash. The words are put
// together a byte at a time, in registers: copying the key into an array
// and loading the array's words made each load wait for the bytes' stores
// to reach the cache, which cost about 5 ns a decision (46 to 41 ns for
// the locked part of one on a hot key).
func wordsOf(key string, h uint64) keyWords {
	if len(key) > inlineKey {
		return keyWords{h, longKey | uint64(len(key))}
	}
	var w0, w1 uint64
	for i := range min(len(key), 8) {
		w0 |= uint64(key[i]) << (8 * i)
	}
	for i := 8; i < len(key); i++ {
		w1 |= uint64(key[i]) << (8 * (i - 8))
	}
	return keyWords{w0, w1 | uint64(len(key))<<56}
}

// bytes returns the bytes of w, which holds a key of up to inlineKey
// bytes: the key is b[:b[15]].
func (w keyWords) bytes() (b [16]byte) {
	binary.LittleEndian.PutUint64(b[:8], w.lo)
	binary.LittleEndian.PutUint64(b[8:], w.hi)
	return b
}

// more is the part of an entry few keys need.
type more struct {
	long     string // the key, if longer than inlineKey
	log      []core.LogEntry
	explicit bool  // the state was last charged at a request's own instant
	expires  int64 // if explicit, when the store may drop the state (ns)
}

// free reports whether the slot holding e is free.
func (e *entry) free() bool { return e.key.hi == 0 }

// is reports whether e is the entry of key, whose words are w.
func (e *entry) is(w keyWords, key string) bool {
	return e.key == w && (w.hi&longKey != longKey || e.more.long == key)
}

// setKey makes e the entry of key, whose words are w, copying a long key:
// the caller's string may be a slice of something larger (a request
// header), which the store must not keep alive.
func (e *entry) setKey(w keyWords, key string) {
	e.key = w
	if len(key) > inlineKey {
		e.more = &more{long: strings.Clone(key)}
	}
}

// load makes st, a shard's scratch state, a copy of e's state for an
// algorithm to run on. It writes only what differs: on a hot key st holds
// that key's state already, so st's cache line is only read, and CPUs
// taking turns at the key keep it in their caches instead of passing it
// from one to the other on every decision. (On one hot key under 64
// goroutines on 2 CPUs, writing st every time cost a decision about 85
// ns instead of 57.)
func (e *entry) load(st *core.State) {
	if st.Last != e.last || st.Vals != e.vals || st.Expires != e.expiresMicros {
		st.Last, st.Expires = e.last, e.expiresMicros
		st.Vals = e.vals
	}
	var log []core.LogEntry
	if e.more != nil {
		log = e.more.log
	}
	if log != nil || st.Log != nil {
		st.Log = log
	}
}

// keep copies st, the state a transition ran on, back to e, writing only
// what the transition changed (a denial changes nothing).
func (e *entry) keep(st *core.State) {
	if st.Last != e.last || st.Vals != e.vals || st.Expires != e.expiresMicros {
		e.last, e.expiresMicros = st.Last, st.Expires
		e.vals = st.Vals
	}
	if st.Log != nil || e.more != nil && e.more.log != nil {
		if e.more == nil {
			e.more = &more{}
		}
		e.more.log = st.Log
	}
}

// charged records the expiry of a state a request just charged: explicit
// says whether the request had its own instant, and if so expires is
// when the store may drop the state (see [expiry]).
func (e *entry) charged(explicit bool, expires int64) {
	switch {
	case e.more != nil:
		e.more.explicit, e.more.expires = explicit, expires
	case explicit:
		e.more = &more{explicit: true, expires: expires}
	}
}

// expires returns the instant, in ns of the store's clock, from which the
// store may drop e: its Expires, from which every algorithm forgets a state,
// unless it was last charged at a request's own instant (see [expiry]).
func (e *entry) expires() int64 {
	if e.more != nil && e.more.explicit {
		return e.more.expires
	}
	return e.expiresMicros * 1e3 // Expires < 2^53 µs: the product fits in an int64
}
