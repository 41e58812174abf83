package memstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores"
)

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
	hashes := make([]uint64, len(reqs))
	words := make([]keyWords, len(reqs))
	idx := make([]uint64, len(reqs))
	for i := range reqs {
		hashes[i] = s.hash(reqs[i].Key)
		words[i] = wordsOf(reqs[i].Key, hashes[i])
		idx[i] = hashes[i] & s.mask
	}
	order := slices.Compact(slices.Sorted(slices.Values(idx)))
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
	states := make([]core.State, len(reqs))
	entries := make([]*entry, len(reqs))
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
