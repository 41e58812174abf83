package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core"
)

// Defaults for [Config]'s zero fields.
const (
	DefaultMaxKeys       = 1 << 20
	DefaultShards        = 64
	DefaultSweepInterval = time.Minute
)

// evictionSample is how many entries a full shard looks at to choose one to
// evict.
const evictionSample = 8

// maxShards bounds Config.Shards: more locks than this buy nothing.
const maxShards = 1 << 16

// minShardKeys is the fewest keys a shard is made to hold: a small store
// gets fewer shards rather than lose much of MaxKeys to rounding.
const minShardKeys = 64

// Config configures a [Store]. The zero Config is ready to use.
type Config struct {
	// MaxKeys bounds the number of keys (key and algorithm pairs) the
	// store holds, so that a flood of distinct keys cannot exhaust memory.
	// When a shard is full, a new key evicts an expired one if it finds
	// one, else the sampled key closest to expiry, which is the one whose
	// state is nearest to a fresh key's; [Stats] counts evictions. The
	// default is [DefaultMaxKeys]. A key costs about 150 bytes, plus its
	// length if it is longer than 24 bytes (more under the sliding window
	// log).
	MaxKeys int
	// Shards is the number of independently locked parts of the store,
	// rounded up to a power of two, then halved until each shard holds at
	// least 64 keys. More shards mean less contention between goroutines
	// on different keys. The default is [DefaultShards].
	Shards int
	// SweepInterval is how often a background goroutine removes keys
	// whose state has expired. A negative interval disables the sweeper:
	// expired keys are then removed only to make room. The default is
	// [DefaultSweepInterval].
	SweepInterval time.Duration
	// Now is the store's clock, used for requests without an explicit
	// Now and to expire keys. It is called from the sweeper's goroutine as
	// well as the callers', so it must be safe for concurrent use. The
	// default is the wall clock read at New, advanced by the monotonic
	// clock: it costs one clock read instead of [time.Now]'s two, and a
	// step of the wall clock (an NTP correction) neither refills nor
	// drains a limit; in exchange, epoch-aligned windows drift from the
	// wall clock by whatever steps it takes after New (and by time spent
	// suspended, on Linux).
	Now func() time.Time
}

// Store is an in-process [core.Store]. It is safe for concurrent use;
// decisions for one key are serialized by the key's shard lock.
//
// A key's state expires once the algorithm's horizon has passed since its
// last charge, measured on the store's clock: from then on the state
// decides exactly as a fresh key would, so forgetting it changes nothing.
type Store struct {
	shards []shard
	mask   uint64
	seed   maphash.Seed
	// collide is ANDed into every key's hash; all ones except in tests,
	// which clear bits to make distinct keys share a hash.
	collide uint64
	clock   func() time.Time // Config.Now, or nil
	base    time.Time        // time.Now at New
	wall    int64            // base in ns since the Unix epoch
	perCap  int
	closed  atomic.Bool
	stop    chan struct{}
	swept   sync.WaitGroup
}

type shard struct {
	mu      sync.Mutex
	tables  []table // one per algorithm used, so maps are keyed by the key alone
	keys    int     // entries across tables
	rotor   int     // the table eviction starts at
	evicted uint64
	expired uint64
	scratch core.State // a fresh key's state until it is charged
	_       [64]byte   // keep neighbouring shards' locks off one cache line
}

// table holds one algorithm's states in a shard. Entries are found by the
// key's 64-bit hash, the same hash that chose the shard, so a decision
// hashes its key once; keys whose hashes are equal are chained.
type table struct {
	alg     string
	entries map[uint64]*entry
}

// inlineKey is the longest key an entry holds in itself; longer keys are
// cloned beside it. Comparing an inline key reads only the entry's own
// memory, which the decision reads anyway, so a lookup in a large store
// waits for one cache miss less.
const inlineKey = 24

// entry is one key's state: 128 bytes, two cache lines.
type entry struct {
	state   core.State
	expires int64  // store clock, ns since the Unix epoch
	next    *entry // another key of the same hash in the same table, or nil
	short   [inlineKey]byte
	n       int    // the key's length
	long    string // the key, if longer than inlineKey
}

// is reports whether e is key's entry.
func (e *entry) is(key string) bool {
	if len(key) <= inlineKey {
		return e.n == len(key) && string(e.short[:len(key)]) == key
	}
	return e.long == key
}

// setKey stores key in e, copying it: the caller's string may be a slice
// of something larger (a request header), which the store must not keep
// alive.
func (e *entry) setKey(key string) {
	e.n = len(key)
	if len(key) <= inlineKey {
		copy(e.short[:], key)
	} else {
		e.long = strings.Clone(key)
	}
}

// table returns the shard's table for alg, creating it if create is set;
// nil if there is none. Called with sh.mu held.
func (sh *shard) table(alg string, create bool) *table {
	for i := range sh.tables {
		if sh.tables[i].alg == alg {
			return &sh.tables[i]
		}
	}
	if !create {
		return nil
	}
	sh.tables = append(sh.tables, table{alg: alg, entries: make(map[uint64]*entry)})
	return &sh.tables[len(sh.tables)-1]
}

// lockTries is how often lock tries a held shard lock before it waits.
const lockTries = 64

// lock takes sh.mu. A shard lock is held for a few tens of nanoseconds, so
// a caller that finds it held first retries for about as long: with many
// goroutines per CPU, sync.Mutex would put it to sleep at once (it spins
// only while no other goroutine is waiting to run), and waking it costs
// far more than the wait. On one hot key under 16 to 256 goroutines on 2
// CPUs this took a decision from about 138 ns to 128 ns.
func (sh *shard) lock() {
	for range lockTries {
		if sh.mu.TryLock() {
			return
		}
	}
	sh.mu.Lock()
}

// find returns key's entry, h being its hash; nil if the table has none.
func (t *table) find(h uint64, key string) *entry {
	e := t.entries[h]
	for e != nil && !e.is(key) {
		e = e.next
	}
	return e
}

// add puts e, whose key hashes to h and is not in the table, in the table.
func (t *table) add(h uint64, e *entry) {
	e.next = t.entries[h]
	t.entries[h] = e
}

// remove takes e, whose key hashes to h, out of the table.
func (t *table) remove(h uint64, e *entry) {
	first := t.entries[h]
	if first == e {
		if e.next == nil {
			delete(t.entries, h)
		} else {
			t.entries[h] = e.next
		}
		return
	}
	for p := first; p != nil; p = p.next {
		if p.next == e {
			p.next = e.next
			return
		}
	}
}

var _ core.Store = (*Store)(nil)

// New returns a store configured by cfg, with its sweeper running. Call
// [Store.Close] to stop the sweeper.
func New(cfg Config) (*Store, error) {
	switch {
	case cfg.MaxKeys < 0:
		return nil, fmt.Errorf("memstore: MaxKeys %d is negative", cfg.MaxKeys)
	case cfg.Shards < 0 || cfg.Shards > maxShards:
		return nil, fmt.Errorf("memstore: Shards %d is outside 0 to %d", cfg.Shards, maxShards)
	}
	if cfg.MaxKeys == 0 {
		cfg.MaxKeys = DefaultMaxKeys
	}
	if cfg.Shards == 0 {
		cfg.Shards = DefaultShards
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = DefaultSweepInterval
	}
	base := time.Now()
	n := 1 << bits.Len(uint(cfg.Shards-1))
	for n > 1 && cfg.MaxKeys/n < minShardKeys {
		n >>= 1
	}
	s := &Store{
		shards:  make([]shard, n),
		mask:    uint64(n - 1),
		seed:    maphash.MakeSeed(),
		collide: math.MaxUint64,
		clock:   cfg.Now,
		base:    base,
		wall:    base.UnixNano(),
		perCap:  cfg.MaxKeys / n,
		stop:    make(chan struct{}),
	}
	if cfg.SweepInterval > 0 {
		s.swept.Add(1)
		go s.sweep(cfg.SweepInterval)
	}
	return s, nil
}

// Apply decides req, charging the key's state when the request is admitted
// and is not a peek.
func (s *Store) Apply(_ context.Context, req core.Request) (core.Decision, error) {
	if err := req.Validate(); err != nil {
		return core.Decision{}, err
	}
	if req.Limit.IsInf() {
		return core.Unlimited(), nil
	}
	clock := s.now()
	at := clock / 1e3
	if !req.Now.IsZero() {
		at = req.Now.UnixMicro()
	} else if at < 0 || at >= core.MaxUnits {
		return core.Decision{}, fmt.Errorf("memstore: the store's clock reads %v, outside 1970 to 2112", time.Unix(0, clock).UTC())
	}
	var d core.Decision
	if err := s.decide(&req, at, clock, &d); err != nil {
		return core.Decision{}, err
	}
	return d, nil
}

// decide runs req's transition at at µs, the store's clock reading clock
// ns, and writes the decision to d. It is Apply's locked part, kept apart
// so that Apply has no defer: a function with a defer keeps its results
// in memory, and copying the Decision through them cost about 3 ns a
// decision (126 to 123 ns on one hot key).
func (s *Store) decide(req *core.Request, at, clock int64, d *core.Decision) error {
	alg := req.Algorithm.Name()
	h := s.hash(req.Key)
	sh := &s.shards[h&s.mask]
	sh.lock()
	defer sh.mu.Unlock() // an algorithm may panic: never leave a shard locked
	if s.closed.Load() {
		return core.ErrClosed
	}
	var e *entry
	if t := sh.table(alg, false); t != nil {
		e = t.find(h, req.Key)
	}
	changes := changes(req)
	if e == nil {
		// Run a fresh key on the shard's scratch state and keep it only if
		// it was charged: denials, peeks and refunds of unknown keys store
		// nothing.
		sh.scratch = core.State{}
		*d = req.Algorithm.Transition(&sh.scratch, req.Step(at))
		if d.Allowed && changes && req.Op != core.OpRefund {
			s.insert(sh, alg, h, req.Key, &entry{state: sh.scratch, expires: expiry(req, &sh.scratch, clock)}, clock)
		}
		sh.scratch = core.State{}
		return nil
	}
	*d = req.Algorithm.Transition(&e.state, req.Step(at))
	if d.Allowed && changes {
		e.expires = expiry(req, &e.state, clock)
	}
	return nil
}

// hash returns key's hash: its low bits choose the shard, and the whole
// of it finds the key in the shard's tables.
func (s *Store) hash(key string) uint64 {
	return maphash.String(s.seed, key) & s.collide
}

// now reads the store's clock, in ns since the Unix epoch.
func (s *Store) now() int64 {
	if s.clock != nil {
		return s.clock().UnixNano()
	}
	return s.wall + int64(time.Since(s.base))
}

// expiry returns the instant, in ns of the store's clock, from which the
// store may drop a state just charged by req. On the store's own clock that
// is the state's E, from which every algorithm forgets it anyway. A request
// at an explicit instant lives on another timeline, where the store's clock
// says nothing of the state's age, so its state is kept for the
// algorithm's whole horizon after the store's now.
func expiry(req *core.Request, st *core.State, clock int64) int64 {
	if req.Now.IsZero() {
		return st.E * 1e3 // E < 2^53 µs: the product fits in an int64
	}
	return clock + min(int64(req.Algorithm.Horizon(req.Limit)), math.MaxInt64-clock)
}

// insert adds e as key's entry under alg, h being key's hash, first
// making room if the shard is full. Called with sh.mu held.
func (s *Store) insert(sh *shard, alg string, h uint64, key string, e *entry, now int64) {
	if sh.keys >= s.perCap {
		s.evict(sh, now)
	}
	e.setKey(key)
	sh.table(alg, true).add(h, e)
	sh.keys++
}

// evict removes one entry from a full shard: the first expired one it
// meets, else the one closest to expiry among a sample. Called with sh.mu
// held.
func (s *Store) evict(sh *shard, now int64) {
	var from *table
	var soonest *entry
	var at uint64 // soonest's hash
	n := 0
	sh.rotor++ // start at another algorithm's table each time
	for i := range sh.tables {
		t := &sh.tables[(sh.rotor+i)%len(sh.tables)]
	sample:
		for h, e := range t.entries {
			for ; e != nil; e = e.next {
				if soonest == nil || e.expires < soonest.expires {
					from, soonest, at = t, e, h
				}
				if n++; n == evictionSample || e.expires <= now {
					break sample
				}
			}
		}
		if n == evictionSample || soonest != nil && soonest.expires <= now {
			break
		}
	}
	from.remove(at, soonest)
	sh.keys--
	if soonest.expires <= now {
		sh.expired++
	} else {
		sh.evicted++
	}
}

// Reset forgets key's state under alg.
func (s *Store) Reset(_ context.Context, key string, alg core.Algorithm) error {
	if err := core.ValidateKey(key); err != nil {
		return err
	}
	if alg == nil {
		return core.ErrNoAlgorithm
	}
	name := alg.Name()
	h := s.hash(key)
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if s.closed.Load() {
		return core.ErrClosed
	}
	if t := sh.table(name, false); t != nil {
		if e := t.find(h, key); e != nil {
			t.remove(h, e)
			sh.keys--
		}
	}
	return nil
}

// Stats is a snapshot of a store's bookkeeping.
type Stats struct {
	Keys      int    // keys held now
	Evicted   uint64 // live keys dropped to make room for new ones
	Expired   uint64 // expired keys removed by the sweeper or to make room
	MaxKeys   int    // the bound on Keys
	ShardKeys int    // the bound on each shard's keys
}

// Stats returns the store's current counts.
func (s *Store) Stats() Stats {
	st := Stats{MaxKeys: s.perCap * len(s.shards), ShardKeys: s.perCap}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Keys += sh.keys
		st.Evicted += sh.evicted
		st.Expired += sh.expired
		sh.mu.Unlock()
	}
	return st
}

// Sweep removes every key whose state has expired, as the sweeper does on
// each tick.
func (s *Store) Sweep() {
	now := s.now()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, t := range sh.tables {
			for h, first := range t.entries {
				// Keep the chain's live entries, in order.
				var kept, last *entry
				for e := first; e != nil; e = e.next {
					if e.expires <= now {
						sh.keys--
						sh.expired++
						continue
					}
					if last == nil {
						kept = e
					} else {
						last.next = e
					}
					last = e
				}
				switch {
				case kept == nil:
					delete(t.entries, h)
				case last.next != nil || kept != first:
					last.next = nil
					t.entries[h] = kept
				}
			}
		}
		sh.mu.Unlock()
	}
}

func (s *Store) sweep(every time.Duration) {
	defer s.swept.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Sweep()
		}
	}
}

// Close stops the sweeper, waits for it to return and drops every key.
// Calls after Close fail with [core.ErrClosed]. Close is idempotent.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	close(s.stop)
	s.swept.Wait()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.tables, sh.keys = nil, 0
		sh.mu.Unlock()
	}
	return nil
}

// changes reports whether req may change its key's state: a charge,
// refund or reservation of a positive cost. Peeks and zero costs never
// do.
func changes(req *core.Request) bool { return req.Op != core.OpPeek && req.Cost > 0 }
