package rueidisstore

import (
	"context"
	"fmt"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/rediserr"
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
	ints, err := s.evalMulti(ctx, keys, packed, algs)
	if err == nil {
		err = redisscript.Place(ints, at, out)
	}
	if err != nil {
		return fmt.Errorf("rueidisstore: multi: %w", err)
	}
	return nil
}

// evalMulti runs algorithms.MultiScript (EVAL once on NOSCRIPT) on one
// group, the requests of a stack, and reads its reply as integers. On one
// Redis node the group may share its call with concurrent callers'
// decisions.
func (s *Store) evalMulti(ctx context.Context, keys []string, packed, algs string) ([]int64, error) {
	var vals []rueidis.RedisMessage
	var err error
	if s.merges {
		vals, err = s.decide(ctx, &call{script: algorithms.MultiScript(), keys: keys, req: packed, algs: algs})
		err = rediserr.Mark(err, clientDown)
	} else {
		c := &call{keys: keys, req: packed, algs: algs}
		k, args := c.args()
		res := s.script(ctx, algorithms.MultiScript(), k, args...)
		if err = res.Error(); rueidis.IsRedisNil(err) {
			err = fmt.Errorf("%w: no reply", redisscript.ErrMalformed)
		} else if err == nil {
			if vals, err = res.ToArray(); err != nil {
				err = fmt.Errorf("%w: %w", redisscript.ErrMalformed, err)
			}
		}
	}
	if err != nil {
		return nil, err
	}
	ints := make([]int64, len(vals))
	for i := range vals {
		if ints[i], err = vals[i].ToInt64(); err != nil {
			return nil, fmt.Errorf("%w: element %d: %w", redisscript.ErrMalformed, i, err)
		}
	}
	return ints, nil
}
