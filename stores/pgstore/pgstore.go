package pgstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores"
)

// Defaults for [Config]'s zero fields.
const (
	DefaultTable     = "sluice_state"
	DefaultMaxLag    = 10 * time.Millisecond
	DefaultCacheKeys = 1 << 16

	DefaultSweepInterval = time.Minute
	// SweepChunk is how many rows a sweep deletes in one statement.
	SweepChunk = 10000
)

// ErrMalformed reports a reply of the store's function that does not
// have the shape the store wrote it to have: a schema changed under the
// store.
var ErrMalformed = errors.New("pgstore: malformed reply")

// Config configures a [Store]. The zero Config is ready to use.
type Config struct {
	// Table is the name of the table the store keeps its states in,
	// schema-qualified or not ("limits" or "app.limits"); the store's
	// function is named after it, with "_apply" added. New creates both
	// if they do not exist. The default is [DefaultTable].
	Table string
	// Logged makes New create the table as an ordinary, WAL-logged table.
	// By default it is UNLOGGED: a decision writes no WAL, and a crash of
	// the server, or a failover to a replica, forgets every key's state,
	// as if each had never been charged (each key may then admit one more
	// burst). It has no effect on a table that exists.
	Logged bool
	// MaxLag is how far a decision's instant may trail the server's clock
	// when the server confirms it (see [Store]). A call whose instant
	// trails further, because the caller stalled between deciding and
	// sending, is decided again at a fresh instant, with the bound
	// doubled on each try. The default is [DefaultMaxLag].
	MaxLag time.Duration
	// CacheKeys bounds the number of keys whose last known state the
	// store keeps in memory, to send as what it expects. A key it does
	// not know costs one more round trip when its row exists. The default
	// is [DefaultCacheKeys].
	CacheKeys int
	// SweepInterval is how often a goroutine of the store deletes the
	// rows of idle keys ([Store.Sweep]). A negative interval disables it,
	// for a fleet that sweeps from one process or a scheduled job. The
	// default is [DefaultSweepInterval].
	SweepInterval time.Duration
}

// Store keeps limiter state in a PostgreSQL table through a pgx pool. It
// is safe for concurrent use, and does not own its pool: Close does not
// close it.
//
// A decision is one round trip, the call of one function: the store runs
// the algorithm's Go transition (core.Run, core.RunAll) on the state it
// expects the key's row to hold, at the instant it expects the server's
// clock to read, and the function writes the new state only if the row
// still holds the expected state and the instant lies within MaxLag
// before the server's clock. Otherwise it writes nothing and returns the
// row and the clock as it found them, and the store decides again. A
// process's calls for one key are serialised, so that only other
// processes can make it decide again. Batches (ApplyAll) are decided the
// same way in one call, all or nothing.
type Store struct {
	pool    *pgxpool.Pool
	tbl     string // the table's quoted name
	call    string // the function's call
	lag     int64  // MaxLag in µs
	maxKeys int

	base   time.Time    // the local clock's origin
	offset atomic.Int64 // the server's clock less the local one, in µs
	closed atomic.Bool
	stop   chan struct{} // closed by Close
	calls  atomic.Uint64 // calls of the function
	rounds atomic.Uint64 // decisions and batches decided

	ready   atomic.Bool // the schema is created and the clock read
	setup   sync.Mutex  // held while making ready
	creates []string    // the schema's statements
	swept   sync.WaitGroup

	mu      sync.Mutex
	entries map[string]*entry
}

// entry is what a process knows of one key's row.
type entry struct {
	mu    sync.Mutex // serialises the process's calls for the key
	raw   []byte     // the row's state as last seen; nil: no row
	users int        // calls holding or waiting for mu; under Store.mu
}

var _ core.Store = (*Store)(nil)

// New returns a store on pool. It does not reach the server: the store's
// first call creates its table and function if they do not exist (which
// needs the CREATE privilege on the schema) and reads the server's
// clock, and a later call tries again if that failed, so that a process
// starts while its server is down.
func New(pool *pgxpool.Pool, cfg Config) (*Store, error) {
	switch {
	case pool == nil:
		return nil, errors.New("pgstore: nil pool")
	case cfg.MaxLag < 0:
		return nil, fmt.Errorf("pgstore: MaxLag %v is negative", cfg.MaxLag)
	case cfg.CacheKeys < 0:
		return nil, fmt.Errorf("pgstore: CacheKeys %d is negative", cfg.CacheKeys)
	}
	if cfg.Table == "" {
		cfg.Table = DefaultTable
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
	tbl, fn, stmts := schema(cfg.Table, cfg.Logged)
	s := &Store{
		pool:    pool,
		tbl:     tbl,
		call:    "SELECT ok, clock, cur FROM " + fn + "($1, $2, $3, $4, $5, $6)",
		lag:     max(cfg.MaxLag.Microseconds(), 1),
		maxKeys: cfg.CacheKeys,
		base:    time.Now(),
		entries: make(map[string]*entry),
		stop:    make(chan struct{}),
		creates: stmts,
	}
	if cfg.SweepInterval > 0 {
		s.swept.Add(1)
		go s.sweep(cfg.SweepInterval)
	}
	return s, nil
}

// prepare makes the store ready on its first call: it runs the schema's
// statements in one transaction, under an advisory lock so that
// processes starting together do not trip over each other's CREATE, and
// reads the server's clock.
func (s *Store) prepare(ctx context.Context) error {
	if s.ready.Load() {
		return nil
	}
	s.setup.Lock()
	defer s.setup.Unlock()
	if s.ready.Load() {
		return nil
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return wrap("creating the schema", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", "sluice:"+s.tbl); err != nil {
		return wrap("creating the schema", err)
	}
	for _, stmt := range s.creates {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return wrap("creating the schema", err)
		}
	}
	var clock int64
	if err := tx.QueryRow(ctx, "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint").Scan(&clock); err != nil {
		return wrap("reading the clock", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return wrap("creating the schema", err)
	}
	s.offset.Store(clock - s.local())
	s.ready.Store(true)
	return nil
}

// local reads the local monotonic clock, in µs since s.base.
func (s *Store) local() int64 { return time.Since(s.base).Microseconds() }

// now returns the store's estimate of the server's clock, in µs since the
// Unix epoch: the local clock plus the offset the last reply showed.
// Replies leave before they arrive, so the estimate trails the server by
// about half a round trip, and the function confirms that it is not
// ahead.
func (s *Store) now() (int64, error) {
	now := s.local() + s.offset.Load()
	if now < 0 || now >= core.MaxUnits {
		return 0, fmt.Errorf("pgstore: the server's clock reads %v, outside 1970 to 2112", time.UnixMicro(now).UTC())
	}
	return now, nil
}

// Apply decides req in one call of the store's function (more if
// another process changed the key's row meanwhile, or the server's clock
// disagrees with the decision's instant).
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

// ApplyAll decides reqs together in one call of the store's function, all
// or nothing (see [core.Store]): every row it writes is locked, and
// checked to hold the state the decisions were made on, before any is
// written.
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
	if err := s.prepare(ctx); err != nil {
		return err
	}
	// The requests the table decides, all but those under Inf, in the
	// order of their keys, in which their rows are locked.
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
	sorted := make([][]byte, len(idx))
	for j, i := range idx {
		sorted[j] = keys[i]
	}
	states := make([]core.State, len(reqs))
	if len(idx) == 0 {
		at, err := s.now()
		if err != nil {
			return err
		}
		run(states, reqs, at, out)
		return nil
	}
	ents := s.acquire(sorted)
	defer s.release(ents)
	olds := make([][]byte, len(idx))
	news := make([][]byte, len(idx))
	exps := make([]int64, len(idx))
	healed := make([]bool, len(idx))
	for try := 0; ; try++ {
		if s.closed.Load() {
			return core.ErrClosed
		}
		conn, err := s.pool.Acquire(ctx)
		if err != nil {
			return wrap("acquiring a connection", err)
		}
		at, err := s.now()
		if err != nil {
			conn.Release()
			return err
		}
		for j, i := range idx {
			olds[j] = ents[j].raw
			var ok bool
			states[i], ok = decodeState(olds[j])
			healed[j] = !ok
		}
		all := run(states, reqs, at, out)
		for j, i := range idx {
			r := &reqs[i]
			news[j], exps[j] = nil, 0
			// The state changed if the decisions admitted a charge or
			// a refund (or a lease's release, of cost 0). A refund
			// writes no row where there was none.
			switch st := encodeState(&states[i]); {
			case all && !bytes.Equal(st, orFresh(olds[j])) && (olds[j] != nil || r.Op != core.OpRefund):
				news[j] = st
				exps[j] = states[i].E
				if !r.Now.IsZero() {
					exps[j] = at + min(r.Algorithm.Horizon(r.Limit).Microseconds(), core.MaxUnits)
				}
			case healed[j]:
				// An unreadable row, decided as a fresh key's, is
				// replaced by a fresh state, which the sweep removes.
				news[j] = fresh
			}
		}
		argAt := at
		if explicit {
			argAt = 0 // no decision depends on the server's clock
		}
		var (
			ok    bool
			clock int64
			cur   [][]byte
		)
		s.calls.Add(1)
		err = conn.QueryRow(ctx, s.call, sorted, olds, news, exps, argAt, s.lag<<min(try, 20)).Scan(&ok, &clock, &cur)
		received := s.local()
		conn.Release()
		if err != nil {
			return wrap("deciding", err)
		}
		if len(cur) != len(idx) {
			return fmt.Errorf("%w: %d states for %d keys", ErrMalformed, len(cur), len(idx))
		}
		s.offset.Store(clock - received)
		if ok {
			s.rounds.Add(1)
			for j, i := range idx {
				if news[j] != nil {
					ents[j].raw = news[j]
				}
				out[i].Healed = healed[j]
			}
			return nil
		}
		for j := range idx {
			ents[j].raw = cur[j]
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

// orFresh returns raw, or for no row, the state of a key never charged.
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

// Reset deletes key's row under alg.
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
	if err := s.prepare(ctx); err != nil {
		return err
	}
	k := encodeKey(key, alg.Name())
	ents := s.acquire([][]byte{k})
	defer s.release(ents)
	if _, err := s.pool.Exec(ctx, "DELETE FROM "+s.tbl+" WHERE k = $1", k); err != nil {
		return wrap("reset", err)
	}
	ents[0].raw = nil
	return nil
}

// Stats counts a store's work since New.
type Stats struct {
	Decided uint64 // decisions and batches decided by the server
	Calls   uint64 // calls of the function: Decided, plus one for each decision made again
}

// Stats returns the store's counts.
func (s *Store) Stats() Stats {
	return Stats{Decided: s.rounds.Load(), Calls: s.calls.Load()}
}

// Sweep deletes the rows of idle keys: those whose expiry, the instant
// from which their state decides as a fresh key's would, has passed on
// the server's clock. It deletes in statements of at most [SweepChunk]
// rows, each a transaction of its own, and returns how many it deleted.
// A call deciding for a row the sweep deletes finds it gone and decides
// again, as for a fresh key, with the same result.
func (s *Store) Sweep(ctx context.Context) (int64, error) {
	del := "DELETE FROM " + s.tbl + " WHERE k IN (SELECT k FROM " + s.tbl + " WHERE exp < $1 LIMIT $2) AND exp < $1"
	if err := s.prepare(ctx); err != nil {
		return 0, err
	}
	var total int64
	for {
		now, err := s.now()
		if err != nil {
			return total, err
		}
		tag, err := s.pool.Exec(ctx, del, now, SweepChunk)
		if err != nil {
			return total, wrap("sweeping", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < SweepChunk {
			return total, nil
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
// with [core.ErrClosed]. It leaves the pool open. Close is idempotent.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	close(s.stop)
	s.swept.Wait()
	return nil
}
