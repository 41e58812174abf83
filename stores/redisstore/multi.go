package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

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
	var cluster bool
	switch s.client.(type) {
	case *redis.ClusterClient, *redis.Ring:
		cluster = true
	}
	keys, packed, algs, at, ok := redisscript.Together(s.prefix, reqs, out, cluster)
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
		return fmt.Errorf("redisstore: multi: %w", err)
	}
	return nil
}

// evalMulti runs algorithms.MultiScript on one group, the requests of a
// stack, and reads its reply as integers. On one Redis node the group may
// share its call with concurrent callers' decisions.
func (s *Store) evalMulti(ctx context.Context, keys []string, packed, algs string) ([]int64, error) {
	script := algorithms.MultiScript()
	c := &call{args: make([]any, 0, 3+len(keys)+3), keys: keys, req: packed, algs: algs}
	c.args = append(c.args, "evalsha", script.Hash(), strconv.Itoa(len(keys)))
	for _, k := range keys {
		c.args = append(c.args, k)
	}
	c.args = append(c.args, packed, algs, string(redisscript.AppendGroup(nil, len(keys))))
	reply, err := s.script(ctx, c, script)
	if err != nil {
		return nil, err
	}
	vals, ok := reply.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: %T", redisscript.ErrMalformed, reply)
	}
	ints := make([]int64, len(vals))
	for i, v := range vals {
		if ints[i], ok = v.(int64); !ok {
			return nil, fmt.Errorf("%w: element %d is %T", redisscript.ErrMalformed, i, v)
		}
	}
	return ints, nil
}
