package layered

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores"
)

// Defaults for [Config]'s zero fields.
const (
	// DefaultSize is the number of keys the cache holds when Config.Size
	// is zero.
	DefaultSize = 1 << 16
	// DefaultAllotmentTTL is how long an allotment may be spent when
	// Config.AllotmentTTL is zero.
	DefaultAllotmentTTL = time.Second
)

// ErrInvalidConfig reports a [Config] that New cannot use.
var ErrInvalidConfig = errors.New("layered: invalid config")

// maxShards is the most independently locked parts the cache is split
// into; minShardSize the fewest entries each is made to hold.
const (
	maxShards    = 16
	minShardSize = 256
)

// Config configures a [Store]. The zero Config is ready to use: a deny
// cache of [DefaultSize] keys on the monotonic clock, without allotments.
type Config struct {
	// Size bounds the number of keys (key and algorithm pairs) the cache
	// holds, denials and allotments together. When it is full, a new key
	// evicts the least recently used key of its shard (one of up to 16);
	// a key evicted while it holds an allotment loses the allotment's
	// unspent tokens. Zero means [DefaultSize]; a negative Size is an
	// error. There is no unbounded setting. An entry
	// costs about 350 bytes plus the key's length.
	Size int

	// Now is the local clock, which times cached denials and allotments for
	// requests without an explicit [core.Terms.Now]. Only differences
	// between its readings matter, so it need not agree with the remote
	// store's clock, only tick at the same rate. If it steps back, a
	// cached denial is answered as at the instant it was cached, as the
	// remote decides at a key's last charge: the same At and RetryAfter,
	// until the clock is back past the instant the remote said the request
	// would pass; and an allotment lapses that much later, though nothing the
	// remote did not charge is ever admitted. It must be safe for concurrent use. The default is the
	// monotonic clock.
	Now func() time.Time

	// MaxDeny caps how long a denial is served from the cache. A denial
	// is otherwise served until its RetryAfter; a cap makes a Reset done
	// elsewhere in the fleet (or an operator deleting a key in Redis)
	// take effect here within MaxDeny. Zero means no cap; negative is an
	// error.
	MaxDeny time.Duration

	// Allot, when not nil, turns allotments on: it returns the most
	// tokens, in units of cost, to take from the remote at once for a
	// request and spend locally, or 0 (or 1) for none. It is called on
	// every request that could be allotted (see the package
	// documentation: single requests without an explicit Now, under an
	// algorithm that is an [Allotter], such as the token bucket, GCRA or
	// the fixed window), so it must be cheap and safe for concurrent use.
	// The store never takes more than the algorithm's MaxAllotment for the
	// limit (the burst, or the window's rate), and adapts each allotment
	// between 1 and the returned size to what the key spends. The default
	// is nil: no allotments.
	Allot func(req core.Request) int64

	// AllotmentTTL is the longest an allotment may be spent after it was
	// taken; unspent tokens lapse with it. It bounds how far allotments
	// move admissions in time (see the package documentation). An
	// allotment under an algorithm whose capacity comes back when a window
	// ends, such as the fixed window, lives for WindowAllotmentTTL
	// instead, and lapses when the window it was taken in ends. The
	// default is [DefaultAllotmentTTL]; negative is an error.
	AllotmentTTL time.Duration

	// WindowAllotmentTTL is AllotmentTTL for an allotment under an
	// algorithm whose capacity comes back when a window ends ([Allotter]'s
	// Windowed: the fixed window). Such an allotment lapses when its
	// window ends whatever its TTL, so no window admits more than its rate
	// however long the allotment lives: a longer one costs no
	// over-admission, and spares the remote a take every AllotmentTTL for
	// a key that spends slowly. What an allotment holds is still out of
	// the other instances' reach until it lapses (fewer than the
	// allotment per instance and window), and the Remaining its decisions
	// report is as old as its take. The default is AllotmentTTL; negative
	// is an error.
	WindowAllotmentTTL time.Duration
}

// Store is a [core.Store] that puts a bounded local cache in front of a
// remote store: cached denials, and allotments when [Config.Allot] is set.
// It is safe for concurrent use. It starts no goroutine. Decisions made
// locally carry [core.SourceCache] (a cached denial) or
// [core.SourceAllotment] (spent from an allotment); the remote's carry
// what the remote said.
type Store struct {
	remote   core.Store
	shards   []*lru.Cache[cacheKey, *entry]
	mask     uint64
	seed     maphash.Seed
	clock    func() time.Time // Config.Now, or nil for the monotonic clock
	base     time.Time
	maxDeny  int64 // ns; 0 for none
	allot    func(core.Request) int64
	allotTTL int64 // ns
	winTTL   int64 // ns: Config.WindowAllotmentTTL
	size     int

	// epoch counts Resets and admitted refunds. A decision whose remote
	// call overlapped one is not cached: it may describe the state before
	// capacity came back.
	epoch     atomic.Uint64
	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

var _ core.Store = (*Store)(nil)

// cacheKey names a cache entry: one key under one algorithm, as the
// remote names its states. A struct of two strings hashes without
// building a string.
type cacheKey struct {
	key, alg string
}

// New returns a store that caches in front of remote. It fails with an
// error wrapping [ErrInvalidConfig] on a nil remote or a negative Size,
// MaxDeny, AllotmentTTL or WindowAllotmentTTL.
func New(remote core.Store, cfg Config) (*Store, error) {
	switch {
	case remote == nil:
		return nil, fmt.Errorf("%w: nil remote store", ErrInvalidConfig)
	case cfg.Size < 0:
		return nil, fmt.Errorf("%w: Size %d is negative", ErrInvalidConfig, cfg.Size)
	case cfg.MaxDeny < 0:
		return nil, fmt.Errorf("%w: MaxDeny %v is negative", ErrInvalidConfig, cfg.MaxDeny)
	case cfg.AllotmentTTL < 0:
		return nil, fmt.Errorf("%w: AllotmentTTL %v is negative", ErrInvalidConfig, cfg.AllotmentTTL)
	case cfg.WindowAllotmentTTL < 0:
		return nil, fmt.Errorf("%w: WindowAllotmentTTL %v is negative", ErrInvalidConfig, cfg.WindowAllotmentTTL)
	}
	if cfg.Size == 0 {
		cfg.Size = DefaultSize
	}
	if cfg.AllotmentTTL == 0 {
		cfg.AllotmentTTL = DefaultAllotmentTTL
	}
	if cfg.WindowAllotmentTTL == 0 {
		cfg.WindowAllotmentTTL = cfg.AllotmentTTL
	}
	// A power of two of shards, each of at least minShardSize entries
	// (one shard for a small cache), whose sizes add up to at most Size.
	n := 1
	if cfg.Size >= 2*minShardSize {
		n = min(maxShards, 1<<(bits.Len(uint(cfg.Size/minShardSize))-1))
	}
	s := &Store{
		remote:   remote,
		shards:   make([]*lru.Cache[cacheKey, *entry], n),
		mask:     uint64(n - 1),
		seed:     maphash.MakeSeed(),
		clock:    cfg.Now,
		maxDeny:  int64(cfg.MaxDeny),
		allot:    cfg.Allot,
		allotTTL: int64(cfg.AllotmentTTL),
		winTTL:   int64(cfg.WindowAllotmentTTL),
		size:     cfg.Size / n * n,
	}
	if s.clock != nil {
		s.base = s.clock()
	} else {
		s.base = time.Now()
	}
	for i := range s.shards {
		c, err := lru.New[cacheKey, *entry](cfg.Size / n)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err) // cannot happen: the size is positive
		}
		s.shards[i] = c
	}
	return s, nil
}

// now reads the local clock, in ns since New.
func (s *Store) now() int64 {
	if s.clock != nil {
		return int64(s.clock().Sub(s.base))
	}
	return int64(time.Since(s.base))
}

func (s *Store) shard(key string) *lru.Cache[cacheKey, *entry] {
	return s.shards[maphash.String(s.seed, key)&s.mask]
}

// Apply decides req: from an allotment or a cached denial when it can,
// from the remote store otherwise. A request is validated once, where it
// is decided: by this store when an allotment or a cached denial answers
// it, by the remote otherwise (a take included); invalid requests fail
// with the core sentinels, and nothing is ever spent, cached or answered
// for one. A failure of the remote is returned wrapped; cached denials
// are still served while the remote fails, and nothing is ever allowed
// from the cache.
func (s *Store) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	if s.closed.Load() {
		return core.Decision{}, core.ErrClosed
	}
	if req.Terms == nil || req.Algorithm == nil || req.Limit.IsInf() {
		// Nothing of it is cached: the remote decides (and validates).
		return s.callRemote(ctx, &req)
	}
	k := cacheKey{req.Key, req.Algorithm.Name()}
	sh := s.shard(req.Key)
	e, _ := sh.Get(k)
	start, d, ok, err := s.local(ctx, &req, sh, k, e)
	if ok {
		return d, err
	}
	// The remote is asked here, not in a function of its own: a caller
	// that waited for the remote finds its stack gone cold, and every
	// frame it returns through costs it cache lines.
	epoch := s.epoch.Load()
	d, err = s.remote.Apply(ctx, req)
	if err != nil {
		return core.Decision{}, remoteFailed(err)
	}
	s.remember(&req, &d, d.Allowed, sh, k, e, start, epoch)
	return d, nil
}

// local answers req, whose key has the entry e (nil if none), from the
// cache if it can: an allotment's refund or spending, or a cached
// denial. If it cannot (ok is false), it returns the local clock before
// the remote is asked (0 for a request the cache cannot answer from a
// denial, and one with an explicit Now: see remember).
func (s *Store) local(ctx context.Context, req *core.Request, sh *lru.Cache[cacheKey, *entry], k cacheKey, e *entry) (start int64, d core.Decision, ok bool, err error) {
	if req.Op == core.OpRefund && req.Now.IsZero() && e != nil {
		if d, ok, err := e.refundAllotment(req, s.now()); ok {
			return 0, d, true, err
		}
	}
	if req.Op == core.OpRefund || req.Op == core.OpReserve || req.Op == core.OpAtMost {
		// A refund changes the key the other way; a reservation may be
		// admitted with a delay where a plain request is denied; a
		// partial admission admits what a cached denial of a larger cost
		// says nothing of. All are for the remote alone.
		return 0, core.Decision{}, false, nil
	}
	if req.Now.IsZero() {
		start = s.now()
		if most := s.allotmentSize(req); most > 0 {
			if d, ok, err := s.spendAllotment(ctx, req, sh, k, e, most, start); ok || err != nil {
				return 0, d, true, err
			}
		}
	}
	if e != nil {
		if d, ok := e.cachedDenial(req, start); ok {
			d, err := answered(req, d)
			return 0, d, true, err
		}
	}
	return start, core.Decision{}, false, nil
}

// ApplyAll decides reqs together. If a batch of charges meets a live
// cached denial for any of its requests, the whole batch is denied here,
// with no round trip: the denied requests carry their cached decisions
// ([core.SourceCache]) and the others are reported allowed with a Limit
// of 0 (nothing is known of them) and [core.SourceCache]. A batch of
// charges or peeks whose every request is allotted is decided from the
// allotments, all or nothing (see the package documentation). Otherwise
// the whole batch goes to the remote in one ApplyAll, and each request's
// answer updates its cached denial: a denial is cached as Apply's is,
// whether or not another request of the batch was denied too; an
// admitted batch drops the denials its charges made stale, and an
// admitted refund batch drops its keys' denials, as Apply does; a
// request admitted in a denied batch changed nothing and leaves its
// key's denial as it was. Peeks not answered from allotments, refunds,
// reservations and partial admissions go to the remote: a batch of peeks
// is how a stack is inspected, and the cache knows nothing of the rules
// it holds no denial for. A batch is validated once, where it is decided:
// here when a cached denial or allotments answer it, by the remote
// otherwise.
func (s *Store) ApplyAll(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	if len(reqs) == 0 || len(out) != len(reqs) {
		return stores.ValidateAll(reqs, out) // which says what is wrong
	}
	if s.closed.Load() {
		return core.ErrClosed
	}
	op := reqs[0].Op // one for the whole batch
	now := s.now()
	// Where each request's entry is; sh is nil for a request the cache
	// does not hold (an Inf limit). A stack's few rules fit buf.
	var buf [4]slot
	at := buf[:0]
	if len(reqs) > len(buf) {
		at = make([]slot, 0, len(reqs))
	}
	local := false
	for i := range reqs {
		req := &reqs[i]
		var p slot
		if req.Terms != nil && req.Algorithm != nil && !req.Limit.IsInf() {
			p.k = cacheKey{req.Key, req.Algorithm.Name()}
			p.sh = s.shard(req.Key)
			p.e, _ = p.sh.Get(p.k)
			if p.e != nil && op == core.OpCharge {
				if d, ok := p.e.cachedDenial(req, now); ok {
					out[i], p.cached, local = d, true, true
				}
			}
		}
		at = append(at, p)
	}
	if local {
		if err := stores.ValidateAll(reqs, out); err != nil {
			return err
		}
		// The rules not asked are reported at the instant of the first
		// cached denial.
		var when time.Time
		for i := range at {
			if at[i].cached {
				when = out[i].At
				break
			}
		}
		for i := range at {
			if !at[i].cached {
				out[i] = core.Decision{Allowed: true, At: when, Source: core.SourceCache}
			}
		}
		return nil
	}
	if s.allot != nil && (op == core.OpCharge || op == core.OpPeek) {
		if ok, err := s.allotAll(ctx, reqs, out, at, now); ok || err != nil {
			return err
		}
	}
	epoch := s.epoch.Load()
	if err := s.remote.ApplyAll(ctx, reqs, out); err != nil {
		return fmt.Errorf("layered: remote: %w", err)
	}
	// The batch took effect only if every request was admitted; a request
	// admitted in a denied batch changed nothing.
	applied := true
	for i := range out {
		applied = applied && out[i].Allowed
	}
	for i := range at {
		if p := &at[i]; p.sh != nil {
			s.remember(&reqs[i], &out[i], applied, p.sh, p.k, p.e, now, epoch)
		}
	}
	return nil
}

// answered returns d, the store's own answer to req, if req is valid.
func answered(req *core.Request, d core.Decision) (core.Decision, error) {
	if err := req.Validate(); err != nil {
		return core.Decision{}, err
	}
	return d, nil
}

// slot is where a request of a batch has its cache entry: the shard, the
// key, the entry if there was one, and whether its cached denial answered.
type slot struct {
	sh     *lru.Cache[cacheKey, *entry]
	k      cacheKey
	e      *entry
	cached bool
}

// callRemote asks the remote store, wrapping its failure. The request
// comes by pointer: it is copied once, into the remote's call.
func (s *Store) callRemote(ctx context.Context, req *core.Request) (core.Decision, error) {
	d, err := s.remote.Apply(ctx, *req)
	if err != nil {
		return core.Decision{}, remoteFailed(err)
	}
	return d, nil
}

// remoteFailed wraps a failure of the remote. It is kept out of its
// callers, whose frames stay small without it: a caller that waited for
// the remote finds its stack gone cold, a cache line a few nanoseconds.
//
//go:noinline
func remoteFailed(err error) error { return fmt.Errorf("layered: remote: %w", err) }

// remember updates the key's cached denial with the remote's answer d to
// req, sent at start on the local clock when the epoch was epoch; applied
// reports whether req took effect (for a request of a batch, whether the
// whole batch was admitted). A denial is remembered (unless the cached
// one is the same answer: see repeats), an applied charge forgets the
// denial, an applied refund forgets every denial decided before it. A
// request admitted in a denied batch changed nothing, and leaves the
// denial as it was.
func (s *Store) remember(req *core.Request, d *core.Decision, applied bool, sh *lru.Cache[cacheKey, *entry], k cacheKey, e *entry, start int64, epoch uint64) {
	switch {
	case !d.Allowed && req.Cost > 0 && req.Op != core.OpReserve && req.Op != core.OpAtMost && d.RetryAfter > 0 && !d.Unsatisfiable() && !core.Leases(req.Algorithm):
		if s.epoch.Load() != epoch {
			break // a Reset overlapped the call
		}
		if e == nil {
			e = s.entry(sh, k)
		}
		if dn := e.deny.Load(); dn != nil && dn.repeats(req, d) {
			break // the denial cached stands: nothing to allocate
		}
		dn := &denial{limit: req.Limit, cost: req.Cost, d: *d}
		if req.Now.IsZero() {
			dn.retryAt = start + int64(d.RetryAfter)
			dn.until = dn.retryAt
			if s.maxDeny > 0 {
				dn.until = start + min(int64(d.RetryAfter), s.maxDeny)
			}
			dn.at = start
		} else {
			dn.explicit, dn.at = true, req.Now.UnixMicro()
		}
		e.deny.Store(dn)
		if s.epoch.Load() != epoch {
			// A refund or Reset finished while this was stored: it may
			// have looked for a denial to drop before there was one.
			e.deny.CompareAndSwap(dn, nil)
		}
	case applied && req.Op == core.OpRefund && req.Cost > 0:
		// Capacity came back: no denial decided before now may stand,
		// including one whose call overlapped this refund (the epoch) and
		// one cached since this call looked its entry up (the Peek).
		s.epoch.Add(1)
		if e, ok := sh.Peek(k); ok {
			e.deny.Store(nil)
			e.mu.Lock()
			if e.allotment != nil {
				e.allotment.wait = nil
			}
			e.mu.Unlock()
		}
	case applied && req.Cost > 0 && req.Op != core.OpPeek && e != nil:
		// The state changed: a denial cached before it no longer tells
		// the remaining budget.
		e.deny.Store(nil)
	}
}

// entry returns the cache's entry for k, adding a new one if there is
// none.
func (s *Store) entry(sh *lru.Cache[cacheKey, *entry], k cacheKey) *entry {
	if e, ok := sh.Get(k); ok {
		return e
	}
	e := new(entry)
	if prev, found, _ := sh.PeekOrAdd(k, e); found {
		return prev
	}
	return e
}

// Reset forgets key's state under alg at the remote store, and drops the
// local denial and allotment for it. A Reset done at another instance of the
// fleet is seen here only when the cached denial or allotment lapses (see
// [Config.MaxDeny]).
func (s *Store) Reset(ctx context.Context, key string, alg core.Algorithm) error {
	if err := stores.ValidateReset(key, alg); err != nil {
		return err
	}
	if s.closed.Load() {
		return core.ErrClosed
	}
	s.epoch.Add(1)
	err := s.remote.Reset(ctx, key, alg)
	// Calls that overlapped the remote Reset see the epoch move and cache
	// nothing; what they cached before it is dropped here.
	s.epoch.Add(1)
	k := cacheKey{key, alg.Name()}
	sh := s.shard(key)
	if e, ok := sh.Peek(k); ok {
		e.drop()
		sh.Remove(k)
	}
	if err != nil {
		return fmt.Errorf("layered: remote: %w", err)
	}
	return nil
}

// Len returns the number of keys the cache holds, at most [Config.Size].
func (s *Store) Len() int {
	n := 0
	for _, sh := range s.shards {
		n += sh.Len()
	}
	return n
}

// Size returns the most keys the cache holds: [Config.Size], rounded down
// to a multiple of the number of the cache's shards (a power of two up to
// 16, each of at least 256 keys).
func (s *Store) Size() int { return s.size }

// Unwrap returns the remote store.
func (s *Store) Unwrap() core.Store { return s.remote }

// Close stops the store and drops the cache, then closes the remote
// store, returning its error. Later calls fail with
// [core.ErrClosed]. Close is idempotent: a second call returns the first
// one's result. Tokens of allotments not yet spent are lost, as when an
// allotment lapses.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		for _, sh := range s.shards {
			sh.Purge()
		}
		if err := s.remote.Close(); err != nil {
			s.closeErr = fmt.Errorf("layered: closing the remote: %w", err)
		}
	})
	return s.closeErr
}
