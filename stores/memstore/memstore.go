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
	// default is [DefaultMaxKeys]. A key costs about 120 bytes plus its
	// length (more under the sliding window log).
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
	clock  func() time.Time // Config.Now, or nil
	base   time.Time        // time.Now at New
	wall   int64            // base in ns since the Unix epoch
	perCap int
	closed atomic.Bool
	stop   chan struct{}
	swept  sync.WaitGroup
}

type shard struct {
	mu      sync.Mutex
	tables  []table // one per algorithm used, so maps are keyed by string alone
	keys    int     // entries across tables
	rotor   int     // the table eviction starts at
	evicted uint64
	expired uint64
	scratch core.State // a fresh key's state until it is charged
	_       [64]byte   // keep neighbouring shards' locks off one cache line
}

// table holds one algorithm's states in a shard.
type table struct {
	alg     string
	entries map[string]*entry
}

type entry struct {
	state   core.State
	expires int64 // store clock, ns since the Unix epoch
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
	sh.tables = append(sh.tables, table{alg: alg, entries: make(map[string]*entry)})
	return &sh.tables[len(sh.tables)-1]
}

var (
	_ core.Store    = (*Store)(nil)
	_ core.Resetter = (*Store)(nil)
)

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
		shards: make([]shard, n),
		mask:   uint64(n - 1),
		seed:   maphash.MakeSeed(),
		clock:  cfg.Now,
		base:   base,
		wall:   base.UnixNano(),
		perCap: cfg.MaxKeys / n,
		stop:   make(chan struct{}),
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
	alg := req.Algorithm.Name()
	sh := &s.shards[maphash.String(s.seed, req.Key)&s.mask]

	sh.mu.Lock()
	defer sh.mu.Unlock() // an algorithm may panic: never leave a shard locked
	if s.closed.Load() {
		return core.Decision{}, core.ErrClosed
	}
	var e *entry
	if t := sh.table(alg, false); t != nil {
		e = t.entries[req.Key]
	}
	changes := !req.Peek && req.Cost > 0 // a charge or a refund
	if e == nil {
		// Run a fresh key on the shard's scratch state and keep it only if
		// it was charged: denials, peeks and refunds of unknown keys store
		// nothing.
		sh.scratch = core.State{}
		d := req.Algorithm.Transition(&sh.scratch, req.Step(at))
		if d.Allowed && changes && !req.Refund {
			s.insert(sh, alg, req.Key, &entry{state: sh.scratch, expires: expiry(&req, &sh.scratch, clock)}, clock)
		}
		sh.scratch = core.State{}
		return d, nil
	}
	d := req.Algorithm.Transition(&e.state, req.Step(at))
	if d.Allowed && changes {
		e.expires = expiry(&req, &e.state, clock)
	}
	return d, nil
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

// insert adds e for key under alg, first making room if the shard is full.
// Called with sh.mu held.
func (s *Store) insert(sh *shard, alg, key string, e *entry, now int64) {
	if sh.keys >= s.perCap {
		s.evict(sh, now)
	}
	// Clone the key: the caller's string may be a slice of something
	// larger (a request header), which the store must not keep alive.
	sh.table(alg, true).entries[strings.Clone(key)] = e
	sh.keys++
}

// evict removes one entry from a full shard: the first expired one it
// meets, else the one closest to expiry among a sample. Called with sh.mu
// held.
func (s *Store) evict(sh *shard, now int64) {
	var victim string
	var from *table
	var soonest *entry
	n := 0
	sh.rotor++ // start at another algorithm's table each time
	for i := range sh.tables {
		t := &sh.tables[(sh.rotor+i)%len(sh.tables)]
		for k, e := range t.entries {
			if soonest == nil || e.expires < soonest.expires {
				victim, from, soonest = k, t, e
			}
			if n++; n == evictionSample || e.expires <= now {
				break
			}
		}
		if n == evictionSample || soonest != nil && soonest.expires <= now {
			break
		}
	}
	delete(from.entries, victim)
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
	sh := &s.shards[maphash.String(s.seed, key)&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if s.closed.Load() {
		return core.ErrClosed
	}
	if t := sh.table(name, false); t != nil {
		if _, ok := t.entries[key]; ok {
			delete(t.entries, key)
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
			for k, e := range t.entries {
				if e.expires <= now {
					delete(t.entries, k)
					sh.keys--
					sh.expired++
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
