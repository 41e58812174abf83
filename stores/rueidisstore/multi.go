package rueidisstore

import (
	"context"
	"fmt"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/wire"
)

var _ core.MultiStore = (*Store)(nil)

// ApplyAll decides reqs in one call of algorithms.MultiScript, all or
// nothing (see [core.MultiStore]): on a single Redis always, on a Cluster
// when every request is for one key (and so one slot), such as a burst
// limit and a daily quota on one user. Otherwise, or for an algorithm of
// your own, it charges in turn and refunds ([core.ApplyInTurn]).
func (s *Store) ApplyAll(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	if err := core.ValidateAll(reqs, out); err != nil {
		return err
	}
	if s.closed.Load() {
		return core.ErrClosed
	}
	keys, packed, algs, at, ok := wire.Together(s.prefix, reqs, s.client.Mode() == rueidis.ClientModeCluster)
	if !ok {
		return core.ApplyInTurn(ctx, s, reqs, out)
	}
	for i := range reqs {
		if reqs[i].Limit.IsInf() {
			out[i] = core.Unlimited()
		}
	}
	if len(at) == 0 {
		return nil
	}
	script := algorithms.MultiScript()
	res := s.client.Do(ctx, s.client.B().Evalsha().Sha1(script.Hash()).Numkeys(int64(len(keys))).Key(keys...).Arg(packed, algs).Build())
	if re, ok := rueidis.IsRedisErr(res.Error()); ok && re.IsNoScript() {
		res = s.client.Do(ctx, s.client.B().Eval().Script(script.Source()).Numkeys(int64(len(keys))).Key(keys...).Arg(packed, algs).Build())
	}
	if err := res.Error(); rueidis.IsRedisNil(err) {
		return fmt.Errorf("rueidisstore: multi: %w: no reply", wire.ErrMalformed)
	} else if err != nil {
		return fmt.Errorf("rueidisstore: multi: %w", err)
	}
	vals, err := res.ToArray()
	if err != nil {
		return fmt.Errorf("rueidisstore: multi: %w: %w", wire.ErrMalformed, err)
	}
	ints := make([]int64, len(vals))
	for i := range vals {
		if ints[i], err = vals[i].ToInt64(); err != nil {
			return fmt.Errorf("rueidisstore: multi: %w: element %d: %w", wire.ErrMalformed, i, err)
		}
	}
	ds, err := wire.Decisions(ints, len(at))
	if err != nil {
		return fmt.Errorf("rueidisstore: multi: %w", err)
	}
	for j, i := range at {
		out[i] = ds[j]
	}
	return nil
}
