package memstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores"
)

// smallBatch is the largest batch ApplyAll decides without allocating:
// more rules than a stack has in practice.
const smallBatch = 8

// scratch is ApplyAll's working memory for a batch of up to smallBatch
// requests. It comes from a pool: the states it holds go to the
// algorithms' Transition, an interface's method, so they could not live
// on ApplyAll's stack.
type scratch struct {
	hashes, idx, order [smallBatch]uint64
	words              [smallBatch]keyWords
	states             [smallBatch]core.State
	entries            [smallBatch]*entry
}

var scratches = sync.Pool{New: func() any { return new(scratch) }}

// free empties the states and entries a batch of n requests used (a log's
// entries, the store's entries) and hands sc to the next batch.
func (sc *scratch) free(n int) {
	n = min(n, smallBatch)
	clear(sc.states[:n])
	clear(sc.entries[:n])
	scratches.Put(sc)
}

// ApplyAll decides reqs as one atomic step (see [core.Store]), whatever
// their operation: it takes the locks of every shard the keys live in, in
// a fixed order, runs each request's transition on a copy of its key's
// state, and keeps the copies only if every request was admitted. As with
// [Store.Apply], only an admitted charge or reservation of a positive
// cost adds a key the store does not hold; peeks, refunds and zero costs
// never do.
func (s *Store) ApplyAll(_ context.Context, reqs []core.Request, out []core.Decision) error {
	if err := stores.ValidateAll(reqs, out); err != nil {
		return err
	}
	clock := s.now()
	if at := clock / 1e3; at < 0 || at >= core.MaxUnits {
		return fmt.Errorf("memstore: the store's clock reads %v, outside 1970 to 2112", time.Unix(0, clock).UTC())
	}
	// The batch's working slices: for a batch of a stack's size, a
	// scratch from the pool, so that deciding a stack allocates nothing.
	n := len(reqs)
	sc := scratches.Get().(*scratch)
	defer sc.free(n)
	hashes, idx, order := sc.hashes[:], sc.idx[:], sc.order[:]
	words, states, entries := sc.words[:], sc.states[:], sc.entries[:]
	if n > smallBatch {
		hashes, idx, order = make([]uint64, n), make([]uint64, n), make([]uint64, n)
		words, states, entries = make([]keyWords, n), make([]core.State, n), make([]*entry, n)
	}
	hashes, idx, order = hashes[:n], idx[:n], order[:n]
	words, states, entries = words[:n], states[:n], entries[:n]
	for i := range reqs {
		hashes[i] = s.hash(reqs[i].Key)
		words[i] = wordsOf(reqs[i].Key, hashes[i])
		idx[i] = hashes[i] & s.mask
	}
	copy(order, idx)
	slices.Sort(order)
	order = slices.Compact(order) // the shards to lock, in a fixed order
	for _, n := range order {
		s.shards[n].mu.Lock()
	}
	defer func() {
		for _, n := range order {
			s.shards[n].mu.Unlock()
		}
	}()
	if s.closed.Load() {
		return core.ErrClosed
	}
	for i := range reqs {
		req := &reqs[i]
		if req.Limit.IsInf() {
			continue
		}
		if t := s.shards[idx[i]].table(req.Algorithm.Name(), false); t != nil {
			entries[i] = t.find(hashes[i], words[i], req.Key)
		}
		if e := entries[i]; e != nil {
			e.load(&states[i])
			states[i].Log = slices.Clone(states[i].Log) // the transition may write in place
		}
	}
	if !core.RunAll(states, reqs, clock/1e3, out) {
		return nil
	}
	// Keep the new states: first those of keys the store holds, then new
	// keys, whose insertion may evict and moves entries in their tables
	// (so the entries found above are not used after it).
	for i, e := range entries {
		if req := &reqs[i]; e != nil && changes(req) {
			e.keep(&states[i])
			e.charged(!req.Now.IsZero(), expiry(req, clock))
		}
	}
	for i, e := range entries {
		if req := &reqs[i]; e == nil && changes(req) && req.Op != core.OpRefund && !req.Limit.IsInf() {
			e := s.insert(&s.shards[idx[i]], req.Algorithm.Name(), hashes[i], words[i], req.Key, clock)
			e.keep(&states[i])
			e.charged(!req.Now.IsZero(), expiry(req, clock))
		}
	}
	return nil
}
