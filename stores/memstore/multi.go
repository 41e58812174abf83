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
	idx := make([]uint64, len(reqs))
	for i := range reqs {
		hashes[i] = s.hash(reqs[i].Key)
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
	admitted := true
	for i := range reqs {
		req := &reqs[i]
		if req.Limit.IsInf() {
			out[i] = core.Unlimited()
			continue
		}
		if t := s.shards[idx[i]].table(req.Algorithm.Name(), false); t != nil {
			entries[i] = t.find(hashes[i], req.Key)
		}
		if e := entries[i]; e != nil {
			states[i] = e.state
			states[i].Log = slices.Clone(e.state.Log) // the transition may write in place
		}
		at := clock / 1e3
		if !req.Now.IsZero() {
			at = req.Now.UnixMicro()
		}
		out[i] = req.Algorithm.Transition(&states[i], req.Step(at))
		admitted = admitted && out[i].Allowed
	}
	if !admitted {
		return nil
	}
	// Keep the new states: first those of keys the store holds, then new
	// keys, whose insertion may evict.
	for i, e := range entries {
		if e != nil && changes(&reqs[i]) {
			e.state = states[i]
			e.expires = expiry(&reqs[i], &e.state, clock)
		}
	}
	for i, e := range entries {
		if req := &reqs[i]; e == nil && changes(req) && req.Op != core.OpRefund && !req.Limit.IsInf() {
			s.insert(&s.shards[idx[i]], req.Algorithm.Name(), hashes[i], req.Key, &entry{state: states[i], expires: expiry(req, &states[i], clock)}, clock)
		}
	}
	return nil
}
