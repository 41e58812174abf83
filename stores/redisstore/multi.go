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
	reply, err := s.evalMulti(ctx, keys, packed, algs)
	if err == nil {
		err = redisscript.Place(reply, at, out)
	}
	if err != nil {
		return fmt.Errorf("redisstore: multi: %w", err)
	}
	return nil
}

// evalMulti runs algorithms.MultiScript on one group, the requests of a
// stack, and returns its packed reply. On one Redis node the group may
// share its call with concurrent callers' decisions.
func (s *Store) evalMulti(ctx context.Context, keys []string, packed, algs string) (string, error) {
	script := algorithms.MultiScript()
	c := &call{args: make([]any, 0, 3+len(keys)+3), keys: keys, req: packed, algs: algs}
	c.args = append(c.args, "evalsha", script.Hash(), strconv.Itoa(len(keys)))
	for _, k := range keys {
		c.args = append(c.args, k)
	}
	c.args = append(c.args, packed, algs, redisscript.Group(len(keys)))
	reply, err := s.script(ctx, c, script)
	if err != nil {
		return "", err
	}
	packed, ok := reply.(string)
	if !ok {
		return "", fmt.Errorf("%w: %T", redisscript.ErrMalformed, reply)
	}
	return packed, nil
}
