package rueidisstore

import (
	"context"
	"fmt"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redisscript"
	"github.com/sluicehq/sluice/stores"
)

// ApplyAll decides reqs together (see [core.Store]) in one call of
// algorithms.MultiScript, all or nothing, whatever their operation
// (charges, peeks, refunds, reservations, concurrency leases): on a
// single Redis always, and on a Cluster when every request is for one key
// (and so one slot), such as a burst limit and a daily quota on one user.
// Otherwise, or for an algorithm of your own, it decides in turn and
// refunds ([stores.ApplyInTurn]): charges are then briefly visible to
// other callers. Requests under [core.Inf] are allowed without a call.
func (s *Store) ApplyAll(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	if err := stores.ValidateAll(reqs, out); err != nil {
		return err
	}
	if s.closed.Load() {
		return core.ErrClosed
	}
	keys, packed, algs, at, ok := redisscript.Together(s.prefix, reqs, out, s.client.Mode() == rueidis.ClientModeCluster)
	switch {
	case !ok:
		return stores.ApplyInTurn(ctx, s, reqs, out)
	case len(at) == 0:
		return nil
	}
	reply, err := s.evalMulti(ctx, keys, packed, algs)
	if err == nil {
		err = redisscript.Place(reply, at, out)
	}
	if err != nil {
		return fmt.Errorf("rueidisstore: multi: %w", err)
	}
	return nil
}

// evalMulti runs algorithms.MultiScript (EVAL once on NOSCRIPT) on one
// group, the requests of a stack, and returns its packed reply. On one
// Redis node the group may share its call with concurrent callers'
// decisions.
func (s *Store) evalMulti(ctx context.Context, keys []string, packed, algs string) (string, error) {
	if s.merges {
		reply, err := s.decide(ctx, &call{script: algorithms.MultiScript(), keys: keys, req: packed, algs: algs})
		return reply, s.mark(ctx, err)
	}
	c := &call{keys: keys, req: packed, algs: algs}
	k, args := c.args()
	res := s.script(ctx, algorithms.MultiScript(), k, args...)
	if err := res.Error(); rueidis.IsRedisNil(err) {
		return "", fmt.Errorf("%w: no reply", redisscript.ErrMalformed)
	} else if err != nil {
		return "", err
	}
	reply, err := res.ToString()
	if err != nil {
		return "", fmt.Errorf("%w: %w", redisscript.ErrMalformed, err)
	}
	return reply, nil
}
