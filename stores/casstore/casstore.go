package casstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores"
)

// Defaults for [Config]'s zero fields.
const (
	DefaultMaxLag        = 10 * time.Millisecond
	DefaultCacheKeys     = 1 << 16
	DefaultSweepInterval = time.Minute
	DefaultMaxSwaps      = 4
	// SweepChunk is the most states [Store.Sweep] asks the backend to
	// delete at once ([Backend.Expire]'s limit).
	SweepChunk = 10000
	// MaxTries bounds the Swaps of one decision: a call that finds its
	// keys changed, or the clock moved on, this many times in a row fails
	// with an error wrapping core.ErrUnavailable, rather than trying for
	// ever against a backend that never agrees.
	MaxTries = 1000
)

// ErrMalformed reports a reply of a backend that cannot be one:
// [Reply.Cur] of another length than the batch's keys.
var ErrMalformed = errors.New("casstore: malformed reply")

// Config configures a [Store]. The zero Config is ready to use.
type Config struct {
	// MaxLag is how far a decision's instant may trail the backend's
	// clock when the backend confirms it (see [Store]). A call whose
	// instant trails further, because the caller stalled between deciding
	// and sending, is decided again at a fresh instant, with the bound
	// doubled on each try. The default is [DefaultMaxLag].
	MaxLag time.Duration
	// CacheKeys bounds the number of keys whose last known state the
	// store keeps in memory, to send as what it expects. A key it does
	// not know costs one more round trip when the backend has a state
	// for it. The default is [DefaultCacheKeys].
	CacheKeys int
	// SweepInterval is how often a goroutine of the store deletes the
	// states of idle keys ([Store.Sweep]). A negative interval disables
	// it, for a fleet that sweeps from one process or a scheduled job.
	// The default is [DefaultSweepInterval].
	SweepInterval time.Duration
	// MaxSwaps bounds the Swaps the store has in flight at once. A call
	// that comes while that many are waits, and is then decided with
	// the others that waited, in one Swap (see [Store]). Give the
	// backend's pool at least as many connections. The default is
	// [DefaultMaxSwaps].
	MaxSwaps int
}

// Store is a [core.Store] on a [Backend]: every algorithm is decided by
// its Go transition (core.Run, core.RunAll) on the state the store
// expects each key to hold, at the instant it expects the backend's clock
// to read, and the backend writes the new states only if every key still
// holds the expected state and the instant lies within MaxLag before its
// clock ([Backend.Swap]). Otherwise it writes nothing and returns the
// states and its clock as it found them, and the store decides again. A
// decision, and a batch (ApplyAll), is so one Swap, all or nothing, when
// the store's expectations hold.
//
// A store has at most MaxSwaps Swaps in flight. A call that comes while
// they are waits in a queue, and the calls that waited are then decided
// together, up to [MaxGroup] at a time, whatever their keys: each in turn
// on the states the ones before it left, at one instant, with one Swap
// for the group that writes each key's last state (a group commit). Each
// caller gets its own decision, exactly as if the calls had been swapped
// one after another; on a mismatch the whole group is decided again. A
// group takes the turns of its keys (a process swaps a key once at a
// time, so that only other processes make a call decide again), and
// calls whose keys are all its own join it while it waits for them. So
// under load a decision costs a fraction of a round trip, on a hot key
// or on many keys. It is safe for concurrent use.
type Store struct {
	be      Backend
	lag     int64 // MaxLag in µs
	maxKeys int

	base   time.Time    // the local clock's origin
	offset atomic.Int64 // the backend's clock less the local one, in µs
	closed atomic.Bool
	stop   chan struct{} // closed by Close
	calls  atomic.Uint64 // calls of Swap
	rounds atomic.Uint64 // decisions and batches decided
	swept  sync.WaitGroup

	mu       sync.Mutex
	entries  map[string]*entry
	queue    []*call // calls waiting for a place among the Swaps in flight
	inflight int     // groups being decided
	maxSwaps int
}

// entry is what a process knows of one key's state, and the calls that
// wait for it.
type entry struct {
	turn  sync.Mutex // held while a group swaps the key, or a Reset deletes it
	raw   []byte     // the state as last seen, under turn; nil: none
	users int        // groups that refer to the entry; under Store.mu
}

var _ core.Store = (*Store)(nil)

// New returns a store on be. It does not reach the backend. Until a
// reply shows the backend's clock, the store takes it to read the local
// wall clock's time; if it does not, the first call is decided again at
// the backend's.
func New(be Backend, cfg Config) (*Store, error) {
	switch {
	case be == nil:
		return nil, errors.New("casstore: nil backend")
	case cfg.MaxLag < 0:
		return nil, fmt.Errorf("casstore: MaxLag %v is negative", cfg.MaxLag)
	case cfg.CacheKeys < 0:
		return nil, fmt.Errorf("casstore: CacheKeys %d is negative", cfg.CacheKeys)
	case cfg.MaxSwaps < 0:
		return nil, fmt.Errorf("casstore: MaxSwaps %d is negative", cfg.MaxSwaps)
	}
	if cfg.MaxLag == 0 {
		cfg.MaxLag = DefaultMaxLag
	}
	if cfg.CacheKeys == 0 {
		cfg.CacheKeys = DefaultCacheKeys
	}
	if cfg.MaxSwaps == 0 {
		cfg.MaxSwaps = DefaultMaxSwaps
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = DefaultSweepInterval
	}
	s := &Store{
		be:       be,
		lag:      max(cfg.MaxLag.Microseconds(), 1),
		maxKeys:  cfg.CacheKeys,
		maxSwaps: cfg.MaxSwaps,
		base:     time.Now(),
		entries:  make(map[string]*entry),
		stop:     make(chan struct{}),
	}
	s.offset.Store(s.base.UnixMicro())
	if cfg.SweepInterval > 0 {
		s.swept.Add(1)
		go s.sweep(cfg.SweepInterval)
	}
	return s, nil
}

// local reads the local monotonic clock, in µs since s.base.
func (s *Store) local() int64 { return time.Since(s.base).Microseconds() }

// now returns the store's estimate of the backend's clock, in µs since
// the Unix epoch: the local clock plus the offset the last reply showed.
// Replies leave before they arrive, so the estimate trails the backend
// by about half a round trip, and Swap confirms that it is not ahead.
func (s *Store) now() (int64, error) {
	now := s.local() + s.offset.Load()
	if now < 0 || now >= core.MaxUnits {
		return 0, fmt.Errorf("casstore: the backend's clock reads %v, outside 1970 to 2112", time.UnixMicro(now).UTC())
	}
	return now, nil
}

// Apply decides req in one Swap (more if another process changed the
// key's state meanwhile, or the backend's clock disagrees with the
// decision's instant).
func (s *Store) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	if err := req.Validate(); err != nil {
		return core.Decision{}, err
	}
	var out [1]core.Decision
	if err := s.decide(ctx, []core.Request{req}, out[:]); err != nil {
		return core.Decision{}, err
	}
	return out[0], nil
}

// ApplyAll decides reqs together in one Swap, all or nothing (see
// [core.Store]): the backend checks that every key holds the state the
// decisions were made on before it writes any.
func (s *Store) ApplyAll(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	if err := stores.ValidateAll(reqs, out); err != nil {
		return err
	}
	return s.decide(ctx, reqs, out)
}

// decide decides valid reqs together (one request alone as Apply does),
// writing the decisions to out: at once if fewer than MaxSwaps Swaps are
// in flight, else in a group of the calls that waited (see [Store]).
func (s *Store) decide(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	if s.closed.Load() {
		return core.ErrClosed
	}
	// The requests the backend decides, all but those under Inf, in the
	// order of their keys, in which the backend may lock them.
	c := &call{ctx: ctx, reqs: reqs, explicit: true}
	keys := make([][]byte, len(reqs))
	for i := range reqs {
		if reqs[i].Limit.IsInf() {
			continue
		}
		c.idx = append(c.idx, i)
		keys[i] = encodeKey(reqs[i].Key, reqs[i].Algorithm.Name())
		c.explicit = c.explicit && !reqs[i].Now.IsZero()
	}
	if len(c.idx) == 0 {
		at, err := s.now()
		if err != nil {
			return err
		}
		run(make([]core.State, len(reqs)), reqs, at, out)
		return nil
	}
	slices.SortFunc(c.idx, func(a, b int) int { return bytes.Compare(keys[a], keys[b]) })
	c.keys = make([][]byte, len(c.idx))
	for j, i := range c.idx {
		c.keys[j] = keys[i]
	}
	c.out = make([]core.Decision, len(reqs))
	c.wake = make(chan struct{}, 1)
	s.mu.Lock()
	lead := s.inflight < s.maxSwaps && len(s.queue) == 0
	if lead {
		s.inflight++
	} else {
		s.queue = append(s.queue, c)
	}
	s.mu.Unlock()
	if !lead {
		select {
		case <-c.wake:
		case <-ctx.Done():
			if c.state.CompareAndSwap(queued, abandoned) {
				return ctx.Err() // never decided
			}
			if c.state.Load() != leading {
				return ctx.Err() // in a group: it may be decided
			}
			<-c.wake
		}
		lead = c.state.Load() == leading
	}
	if lead {
		s.lead(c)
	}
	if c.err != nil {
		return c.err
	}
	copy(out, c.out)
	return nil
}

// MaxGroup bounds the calls a [Store] decides in one Swap: the calls of
// a process that waited while [Config.MaxSwaps] Swaps were in flight.
const MaxGroup = 64

// The states of a [call].
const (
	queued    int32 = iota // waiting in the store's queue
	taken                  // in a group being decided
	leading                // handed a place among the Swaps in flight: it decides the next group
	abandoned              // its caller gave up before a group took it
)

// call is one caller's decision (Apply) or batch (ApplyAll) on its way
// through the store's queue.
type call struct {
	ctx      context.Context
	reqs     []core.Request
	idx      []int    // the requests under a limit, in the order of their keys
	keys     [][]byte // keys[j] is the key of reqs[idx[j]]
	explicit bool     // every request carries its own instant

	state atomic.Int32
	wake  chan struct{} // sent once the call is decided, or handed a place among the Swaps in flight

	// Written by the group's leader before wake is sent.
	out []core.Decision
	err error
	pos []int // pos[j] is keys[j]'s index in the group's keys
}

// lead decides a group of the calls in the store's queue, which c heads
// or, if it found the queue empty, precedes, then hands its place among
// the Swaps in flight to the call next in the queue, if any. A call whose
// caller has given up is left out, c too: no one would hear its decision.
func (s *Store) lead(c *call) {
	s.mu.Lock()
	from := 0
	if len(s.queue) > 0 && s.queue[0] == c {
		from = 1
	}
	n := min(len(s.queue), from+MaxGroup-1)
	group := make([]*call, 0, 1+n-from)
	for _, m := range append([]*call{c}, s.queue[from:n]...) {
		if m == c || m.state.CompareAndSwap(queued, taken) {
			if m.err = m.ctx.Err(); m.err == nil {
				group = append(group, m)
			}
		}
	}
	s.drop(n)
	s.mu.Unlock()

	if len(group) > 0 {
		group, err := s.decideGroup(group)
		for _, m := range group {
			m.err = err
			if m != c {
				m.wake <- struct{}{}
			}
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.queue) > 0 {
		if next := s.queue[0]; next.state.CompareAndSwap(queued, leading) {
			next.wake <- struct{}{}
			return
		}
		s.drop(1) // abandoned
	}
	s.inflight--
}

// drop removes the first n calls of the store's queue. s.mu must be held.
func (s *Store) drop(n int) {
	rest := copy(s.queue, s.queue[n:])
	clear(s.queue[rest:])
	s.queue = s.queue[:rest]
}

// decideGroup decides the calls of group in turn, each on the states the
// ones before it left, and swaps every key they name at once: one Swap
// for the group when the store's expectations hold. On a mismatch it
// decides every call again on what the backend found.
func (s *Store) decideGroup(group []*call) ([]*call, error) {
	var keys [][]byte
	for _, c := range group {
		keys = append(keys, c.keys...)
	}
	slices.SortFunc(keys, bytes.Compare)
	keys = slices.CompactFunc(keys, bytes.Equal)
	ents := s.acquire(keys, true)
	defer s.release(ents, true)
	group = s.join(group, keys)
	explicit := true
	for _, c := range group {
		c.pos = make([]int, len(c.keys))
		for j, k := range c.keys {
			c.pos[j], _ = slices.BinarySearchFunc(keys, k, bytes.Compare)
		}
		explicit = explicit && c.explicit
	}
	n := len(keys)
	b := &Batch{
		Keys: keys,
		Old:  make([][]byte, n),
		New:  make([][]byte, n),
		Exp:  make([]int64, n),
	}
	ctx, done := groupContext(group)
	defer done()
	for try := 0; ; try++ {
		if s.closed.Load() {
			return group, core.ErrClosed
		}
		if try == MaxTries {
			return group, fmt.Errorf("casstore: %d swaps found the keys changed or the clock moved: %w", MaxTries, core.ErrUnavailable)
		}
		at, err := s.now()
		if err != nil {
			return group, err
		}
		for j, e := range ents {
			b.Old[j], b.New[j], b.Exp[j] = e.raw, nil, 0
		}
		for _, c := range group {
			s.decideCall(c, b, at)
		}
		b.At = at
		if explicit {
			b.At = 0 // no decision depends on the backend's clock
		}
		b.Lag = s.lag << min(try, 20)
		s.calls.Add(1)
		rep, err := s.be.Swap(ctx, b)
		received := s.local()
		if err != nil {
			return group, err
		}
		s.offset.Store(rep.Clock - received)
		if rep.Swapped {
			s.rounds.Add(uint64(len(group)))
			for j, e := range ents {
				if b.New[j] != nil {
					e.raw = b.New[j]
				}
			}
			return group, nil
		}
		if len(rep.Cur) != n {
			return group, fmt.Errorf("%w: %d states for %d keys", ErrMalformed, len(rep.Cur), n)
		}
		for j, e := range ents {
			e.raw = rep.Cur[j]
		}
	}
}

// join adds to group, which holds the turns of keys, the calls in the
// store's queue whose keys are all among them, up to MaxGroup calls in
// all: those that came for a hot key while the group waited for its turn
// join it, rather than wait for a turn of their own.
func (s *Store) join(group []*call, keys [][]byte) []*call {
	s.mu.Lock()
	defer s.mu.Unlock()
	within := func(c *call) bool {
		for _, k := range c.keys {
			if _, ok := slices.BinarySearchFunc(keys, k, bytes.Compare); !ok {
				return false
			}
		}
		return true
	}
	s.queue = slices.DeleteFunc(s.queue, func(c *call) bool {
		if len(group) < MaxGroup && within(c) && c.state.CompareAndSwap(queued, taken) {
			if c.err = c.ctx.Err(); c.err == nil {
				group = append(group, c)
			}
			return true
		}
		return false
	})
	return group
}

// decideCall decides c at the instant at on the states b's group has
// left so far (New where the calls before it wrote, else Old), and
// writes what c changes to b.New and b.Exp.
func (s *Store) decideCall(c *call, b *Batch, at int64) {
	states := make([]core.State, len(c.reqs))
	healed := make([]bool, len(c.keys))
	cur := func(j int) []byte {
		if p := c.pos[j]; b.New[p] != nil {
			return b.New[p]
		}
		return b.Old[c.pos[j]]
	}
	for j, i := range c.idx {
		var ok bool
		states[i], ok = decodeState(cur(j))
		healed[j] = !ok
	}
	all := run(states, c.reqs, at, c.out)
	for j, i := range c.idx {
		r, p, old := &c.reqs[i], c.pos[j], cur(j)
		// The state changed if the decisions admitted a charge or a
		// refund (or a lease's release, of cost 0). A refund writes no
		// state where there was none.
		switch st := encodeState(&states[i]); {
		case all && !bytes.Equal(st, orFresh(old)) && (old != nil || r.Op != core.OpRefund):
			b.New[p] = st
			b.Exp[p] = states[i].Expires
			if !r.Now.IsZero() {
				b.Exp[p] = at + min(r.Algorithm.Horizon(r.Limit).Microseconds(), core.MaxUnits)
			}
		case healed[j]:
			// An unreadable state, decided as a fresh key's, is replaced
			// by a fresh state, which the sweep removes.
			b.New[p], b.Exp[p] = fresh, 0
		}
		c.out[i].Healed = healed[j]
	}
}

// groupContext returns the context of a group's Swaps: a call's own, or
// for several, one that ends when every call's context has ended, with
// the first call's values. Calling done releases it.
func groupContext(group []*call) (ctx context.Context, done func()) {
	if len(group) == 1 {
		return group[0].ctx, func() {}
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(group[0].ctx))
	var left atomic.Int64
	left.Store(int64(len(group)))
	stops := make([]func() bool, len(group))
	for i, c := range group {
		stops[i] = context.AfterFunc(c.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// run decides reqs on states at the instant at, one request as core.Run
// does, several as core.RunAll does, and reports whether every request
// was admitted.
func run(states []core.State, reqs []core.Request, at int64, out []core.Decision) bool {
	if len(reqs) == 1 {
		out[0] = core.Run(&states[0], &reqs[0], at)
		return out[0].Allowed
	}
	return core.RunAll(states, reqs, at, out)
}

// fresh is the encoding of a key never charged.
var fresh = encodeState(&core.State{})

// orFresh returns raw, or for no state, the state of a key never charged.
func orFresh(raw []byte) []byte {
	if raw == nil {
		return fresh
	}
	return raw
}

// acquire returns the entries of keys, which are sorted, taking each
// key's turn in that order if turn.
func (s *Store) acquire(keys [][]byte, turn bool) []*entry {
	ents := make([]*entry, len(keys))
	s.mu.Lock()
	for j, k := range keys {
		e := s.entries[string(k)]
		if e == nil {
			e = new(entry)
			s.entries[string(k)] = e
		}
		e.users++
		ents[j] = e
	}
	s.mu.Unlock()
	if turn {
		for _, e := range ents {
			e.turn.Lock()
		}
	}
	return ents
}

// release gives back ents, and their turns if turn, and while the store
// knows more keys than it may, forgets keys no call is using.
func (s *Store) release(ents []*entry, turn bool) {
	if turn {
		for _, e := range ents {
			e.turn.Unlock()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range ents {
		e.users--
	}
	for k, e := range s.entries {
		if len(s.entries) <= s.maxKeys {
			break
		}
		if e.users == 0 {
			delete(s.entries, k)
		}
	}
}

// Reset deletes key's state under alg ([Backend.Delete]).
func (s *Store) Reset(ctx context.Context, key string, alg core.Algorithm) error {
	if err := core.ValidateKey(key); err != nil {
		return err
	}
	if alg == nil {
		return core.ErrNoAlgorithm
	}
	if s.closed.Load() {
		return core.ErrClosed
	}
	k := encodeKey(key, alg.Name())
	ents := s.acquire([][]byte{k}, true)
	defer s.release(ents, true)
	if err := s.be.Delete(ctx, k); err != nil {
		return err
	}
	ents[0].raw = nil
	return nil
}

// Stats counts a store's work since New.
type Stats struct {
	Decided uint64 // decisions and batches decided by the backend
	Calls   uint64 // calls of Swap: Decided, plus one for each decision made again
}

// Stats returns the store's counts.
func (s *Store) Stats() Stats {
	return Stats{Decided: s.rounds.Load(), Calls: s.calls.Load()}
}

// Sweep deletes the states of idle keys: those whose expiry, the instant
// from which their state decides as a fresh key's would, has passed on
// the backend's clock as the store estimates it. It asks the backend for
// at most [SweepChunk] at a time ([Backend.Expire]) until a call deletes
// fewer, and returns how many it deleted. A call deciding for a key the
// sweep deletes finds its state gone and decides again, as for a fresh
// key, with the same result.
func (s *Store) Sweep(ctx context.Context) (int64, error) {
	var total int64
	for {
		now, err := s.now()
		if err != nil {
			return total, err
		}
		n, err := s.be.Expire(ctx, now, SweepChunk)
		total += n
		if err != nil || n < SweepChunk {
			return total, err
		}
	}
}

// sweep calls Sweep every interval until Close.
func (s *Store) sweep(every time.Duration) {
	defer s.swept.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-s.stop
		cancel()
	}()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Sweep(ctx) // a failure is the next tick's to retry
		}
	}
}

// Close stops the store and its sweeper, waiting for it: later calls fail
// with [core.ErrClosed]. It leaves the backend as it is. Close is
// idempotent.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	close(s.stop)
	s.swept.Wait()
	return nil
}
