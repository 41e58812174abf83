package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"math/rand/v2"
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
	// default is [DefaultMaxKeys]. A key costs 85 to 170 bytes (a 64-byte
	// slot in a table kept between three eighths and three quarters full),
	// plus about 64 bytes and its length if it is longer than 15 bytes
	// (more under the sliding window log). A table keeps its size when
	// keys expire.
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
	// well as the callers', so it must be safe for concurrent use. If it
	// steps back, a key charged later than it now reads is decided at its
	// last charge, as if the clock had stopped there ([core.Decision].At
	// is that instant; RetryAfter counts from it), and is removed as
	// expired only once the clock is back at its expiry: late by the
	// step, never early. A key already removed as expired is fresh at any
	// reading, decided at that reading: it gets the full budget it had
	// when removed. The default is the wall clock read at New, advanced
	// by the monotonic clock: it costs one clock read instead of
	// [time.Now]'s two, and a step of the wall clock (an NTP correction)
	// neither refills nor drains a limit; in exchange, epoch-aligned
	// windows drift from the wall clock by whatever steps it takes after
	// New (and by time spent suspended, on Linux).
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
	scratch core.State // the state a transition runs on (see entry.load)
	_       [64]byte   // keep neighbouring shards' locks off one cache line
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
	sh.tables = append(sh.tables, table{alg: alg})
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
func (s *Store) Apply(_ context.Context, req core.Request) (d core.Decision, err error) {
	if err := req.Validate(); err != nil {
		return core.Decision{}, err
	}
	clock := s.now()
	at := clock / 1e3
	if !req.Now.IsZero() {
		at = req.Now.UnixMicro()
	} else if at < 0 || at >= core.MaxUnits {
		return core.Decision{}, fmt.Errorf("memstore: the store's clock reads %v, outside 1970 to 2112", time.Unix(0, clock).UTC())
	}
	if req.Limit.IsInf() {
		return core.Run(nil, &req, at), nil
	}
	// decide writes the decision where Apply returns it: a decision
	// copied from a variable of Apply's instead made the copy wait for
	// the stores decide had just made to it (see decide).
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
//
// The step is built field by field into a variable, before the lock is
// taken: the lock's atomic instruction waits for the fields' 8-byte
// stores to reach the cache, so that copying the step into the
// transition's arguments 16 bytes at a time does not wait on them (a
// load cannot be forwarded from two stores still in the store buffer).
// Built in the call, the step cost a Limiter.Allow on one hot key about
// 10 ns more, serially (99 against 89 ns); built as req.Step's result,
// which the compiler copies to the variable at once, 4 ns more (90
// against 86).
//
// A partial admission, which is two transitions, is decided by core.Run;
// every other request by its transition, here, with the decision's
// instant added as Run adds it.
func (s *Store) decide(req *core.Request, at, clock int64, d *core.Decision) error {
	var step core.Step
	if req.Op == core.OpReserve {
		step = req.Step(at) // which works out the debt
	} else {
		step.Now, step.Cost, step.Limit, step.Op, step.Lease = at, req.Cost, req.Limit, req.Op, req.Lease
	}
	alg := req.Algorithm.Name()
	h := s.hash(req.Key)
	w := wordsOf(req.Key, h)
	sh := &s.shards[h&s.mask]
	sh.lock()
	defer sh.mu.Unlock() // an algorithm may panic: never leave a shard locked
	if s.closed.Load() {
		return core.ErrClosed
	}
	var e *entry
	if t := sh.table(alg, false); t != nil {
		e = t.find(h, w, req.Key)
	}
	// The transition runs on the shard's scratch state: a copy of the
	// key's, or for a key the store does not hold a fresh state, kept only
	// if it was charged. Denials, peeks and refunds of unknown keys store
	// nothing.
	st := &sh.scratch
	if e != nil {
		e.load(st)
	} else {
		fresh.load(st)
	}
	if req.Op == core.OpAtMost {
		*d = core.Run(st, req, at)
	} else {
		last := st.Last
		*d = core.Transition(req.Algorithm, st, step)
		d.At = time.UnixMicro(max(at, last)).UTC()
	}
	charged := d.Allowed && changes(req)
	if e == nil && charged && req.Op != core.OpRefund {
		e = s.insert(sh, alg, h, w, req.Key, clock)
	}
	if e != nil {
		e.keep(st)
		if charged {
			e.charged(!req.Now.IsZero(), expiry(req, clock))
		}
	}
	if st.Log != nil {
		st.Log = nil // hold no key's log past the decision
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
// store may drop a state just charged by a request at an explicit instant.
// (On the store's own clock that is the state's Expires, from which every
// algorithm forgets it anyway: see [entry.expires].) Such a request lives
// on another timeline, where the store's clock says nothing of the state's
// age, so its state is kept for the algorithm's whole horizon after the
// store's now. Zero for a request on the store's clock.
func expiry(req *core.Request, clock int64) int64 {
	if req.Now.IsZero() {
		return 0
	}
	return clock + min(int64(req.Algorithm.Horizon(req.Limit)), math.MaxInt64-clock)
}

// rehash returns the hash of the key whose words are w, for an entry that
// moves in its table.
func (s *Store) rehash(w keyWords) uint64 {
	if w.hi&longKey == longKey {
		return w.lo
	}
	b := w.bytes()
	return maphash.Bytes(s.seed, b[:b[15]]) & s.collide
}

// insert returns a new entry for key under alg, whose hash is h and words
// w, first making room if the shard is full. Called with sh.mu held.
func (s *Store) insert(sh *shard, alg string, h uint64, w keyWords, key string, now int64) *entry {
	if sh.keys >= s.perCap {
		s.evict(sh, now)
	}
	e := sh.table(alg, true).add(h, s.rehash)
	e.setKey(w, key)
	sh.keys++
	return e
}

// evict removes one entry from a full shard: the first expired one it
// meets, else the one closest to expiry among a sample of consecutive
// entries from a random slot. Called with sh.mu held.
func (s *Store) evict(sh *shard, now int64) {
	var from *table
	at := -1 // the slot of the entry to evict in from
	var soonest int64
	n := 0
	sh.rotor++ // start at another algorithm's table each time
	for i := range sh.tables {
		t := &sh.tables[(sh.rotor+i)%len(sh.tables)]
		if t.n == 0 {
			continue
		}
		mask := len(t.slots) - 1
		j := rand.IntN(len(t.slots))
		for seen := 0; seen < t.n && n < evictionSample; j = (j + 1) & mask {
			if t.slots[j].free() {
				continue
			}
			seen++
			n++
			if exp := t.slots[j].expires(); at < 0 || exp < soonest {
				from, at, soonest = t, j, exp
			}
			if soonest <= now {
				break
			}
		}
		if n == evictionSample || soonest <= now {
			break
		}
	}
	from.removeAt(at, s.rehash)
	sh.keys--
	if soonest <= now {
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
		if i := t.index(h, wordsOf(key, h), key); i >= 0 {
			t.removeAt(i, s.rehash)
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
		for k := range sh.tables {
			t := &sh.tables[k]
			// A removal moves later entries back into the freed slot,
			// so slot i is looked at again after one.
			for i := 0; i < len(t.slots); {
				if e := &t.slots[i]; !e.free() && e.expires() <= now {
					t.removeAt(i, s.rehash)
					sh.keys--
					sh.expired++
					continue
				}
				i++
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
