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
}

// Store is a [core.Store] on a [Backend]: every algorithm is decided by
// its Go transition (core.Run, core.RunAll) on the state the store
// expects each key to hold, at the instant it expects the backend's clock
// to read, and the backend writes the new states only if every key still
// holds the expected state and the instant lies within MaxLag before its
// clock ([Backend.Swap]). Otherwise it writes nothing and returns the
// states and its clock as it found them, and the store decides again. A
// decision, and a batch (ApplyAll), is so one Swap, all or nothing, when
// the store's expectations hold. A process's calls for one key take
// turns, so that only other processes make a call decide again. It is
// safe for concurrent use.
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

	mu      sync.Mutex
	entries map[string]*entry
}

// entry is what a process knows of one key's state.
type entry struct {
	mu    sync.Mutex // serialises the process's calls for the key
	raw   []byte     // the state as last seen; nil: none
	users int        // calls holding or waiting for mu; under Store.mu
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
	}
	if cfg.MaxLag == 0 {
		cfg.MaxLag = DefaultMaxLag
	}
	if cfg.CacheKeys == 0 {
		cfg.CacheKeys = DefaultCacheKeys
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = DefaultSweepInterval
	}
	s := &Store{
		be:      be,
		lag:     max(cfg.MaxLag.Microseconds(), 1),
		maxKeys: cfg.CacheKeys,
		base:    time.Now(),
		entries: make(map[string]*entry),
		stop:    make(chan struct{}),
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
// writing the decisions to out.
func (s *Store) decide(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	if s.closed.Load() {
		return core.ErrClosed
	}
	// The requests the backend decides, all but those under Inf, in the
	// order of their keys, in which the backend may lock them.
	var idx []int
	keys := make([][]byte, len(reqs))
	explicit := true // every request carries its own instant
	for i := range reqs {
		if reqs[i].Limit.IsInf() {
			continue
		}
		idx = append(idx, i)
		keys[i] = encodeKey(reqs[i].Key, reqs[i].Algorithm.Name())
		explicit = explicit && !reqs[i].Now.IsZero()
	}
	slices.SortFunc(idx, func(a, b int) int { return bytes.Compare(keys[a], keys[b]) })
	states := make([]core.State, len(reqs))
	if len(idx) == 0 {
		at, err := s.now()
		if err != nil {
			return err
		}
		run(states, reqs, at, out)
		return nil
	}
	n := len(idx)
	b := &Batch{
		Keys: make([][]byte, n),
		Old:  make([][]byte, n),
		New:  make([][]byte, n),
		Exp:  make([]int64, n),
		Lag:  s.lag,
	}
	for j, i := range idx {
		b.Keys[j] = keys[i]
	}
	healed := make([]bool, n)
	ents := s.acquire(b.Keys)
	defer s.release(ents)
	for try := 0; ; try++ {
		if s.closed.Load() {
			return core.ErrClosed
		}
		if try == MaxTries {
			return fmt.Errorf("casstore: %d swaps found the keys changed or the clock moved: %w", MaxTries, core.ErrUnavailable)
		}
		at, err := s.now()
		if err != nil {
			return err
		}
		for j, i := range idx {
			b.Old[j] = ents[j].raw
			var ok bool
			states[i], ok = decodeState(b.Old[j])
			healed[j] = !ok
		}
		all := run(states, reqs, at, out)
		for j, i := range idx {
			r := &reqs[i]
			b.New[j], b.Exp[j] = nil, 0
			// The state changed if the decisions admitted a charge or
			// a refund (or a lease's release, of cost 0). A refund
			// writes no state where there was none.
			switch st := encodeState(&states[i]); {
			case all && !bytes.Equal(st, orFresh(b.Old[j])) && (b.Old[j] != nil || r.Op != core.OpRefund):
				b.New[j] = st
				b.Exp[j] = states[i].E
				if !r.Now.IsZero() {
					b.Exp[j] = at + min(r.Algorithm.Horizon(r.Limit).Microseconds(), core.MaxUnits)
				}
			case healed[j]:
				// An unreadable state, decided as a fresh key's, is
				// replaced by a fresh state, which the sweep removes.
				b.New[j] = fresh
			}
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
			return err
		}
		s.offset.Store(rep.Clock - received)
		if rep.Swapped {
			s.rounds.Add(1)
			for j, i := range idx {
				if b.New[j] != nil {
					ents[j].raw = b.New[j]
				}
				out[i].Healed = healed[j]
			}
			return nil
		}
		if len(rep.Cur) != n {
			return fmt.Errorf("%w: %d states for %d keys", ErrMalformed, len(rep.Cur), n)
		}
		for j := range idx {
			ents[j].raw = rep.Cur[j]
		}
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

// acquire returns the entries of keys, which are sorted, locked in that
// order.
func (s *Store) acquire(keys [][]byte) []*entry {
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
	for _, e := range ents {
		e.mu.Lock()
	}
	return ents
}

// release unlocks ents and, while the store knows more keys than it may,
// forgets keys no call is using.
func (s *Store) release(ents []*entry) {
	for _, e := range ents {
		e.mu.Unlock()
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
	ents := s.acquire([][]byte{k})
	defer s.release(ents)
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
