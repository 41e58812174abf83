package rueidisstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/internal/callqueue"
	"github.com/sluicehq/sluice/internal/redisscript"
)

// maxMerge is the most requests one merged call of algorithms.MultiScript
// decides (a larger stack goes alone). Redis runs nothing else while a
// script runs: 128 decisions take it a few hundred µs.
const maxMerge = 128

// mergeSenders is how many calls a store has in flight at once before
// further decisions wait to be merged: up to it, a decision is its
// caller's own call, which rueidis pipelines with the others, as fast as
// merging at 16 goroutines on 2 CPUs, where 4 lost 17%; beyond it,
// merging cuts Redis's CPU per decision (see docs/redis.md).
const mergeSenders = 16

// call is one decision, or a stack's decisions, queued to be merged with
// others'.
type call struct {
	callqueue.Call
	script *algorithms.Script // what decides the call sent alone
	key    string             // the key of one decision
	keys   []string           // a stack's keys; nil for one decision
	req    string             // the packed requests
	algs   string             // each request's algorithms.MultiIndex, a byte each
	// The result: a call sent alone has its own; a merged one its part of
	// its call's packed reply, or its call's error.
	res   rueidis.RedisResult
	reply string
	err   error
}

// size returns the number of requests the call decides.
func (c *call) size() int {
	if c.keys != nil {
		return len(c.keys)
	}
	return 1
}

// args returns the call's keys and arguments, as its script takes them
// when it is sent alone.
func (c *call) args() (keys, args []string) {
	if c.keys == nil {
		return []string{c.key}, []string{c.req}
	}
	return c.keys, []string{c.req, c.algs, redisscript.Group(len(c.keys))}
}

// decide queues c to be sent with the decisions of concurrent callers and
// returns its packed reply, ten numbers a request, or the error of the
// call that carried it, or ctx's error if ctx ends first.
func (s *Store) decide(ctx context.Context, c *call) (string, error) {
	c.Item = c
	if err := s.queue.Do(ctx, &c.Call); err != nil {
		return "", err
	}
	if c.reply != "" || c.err != nil {
		return c.reply, c.err
	}
	if err := c.res.Error(); err != nil {
		if rueidis.IsRedisNil(err) {
			return "", fmt.Errorf("%w: no reply", redisscript.ErrMalformed)
		}
		return "", err
	}
	reply, err := c.res.ToString()
	if err != nil {
		return "", fmt.Errorf("%w: %w", redisscript.ErrMalformed, err)
	}
	return reply, nil
}

// send sends a batch of queued calls: a lone call as its caller's own;
// more, in runs of up to maxMerge requests, each run as one call of
// algorithms.MultiScript with a group a call (a run of one call as that
// call's own script), all in one DoMulti, then with EVAL the runs that
// found Redis without their script (a missing script ran nothing).
//
// A batch is not any one caller's: it runs on the values of its first
// caller's context until every caller's context has ended (see
// batchContext), as no caller waits for it longer.
func (s *Store) send(batch []*callqueue.Call) {
	if len(batch) == 1 {
		// A lone call is its caller's own, as if unqueued.
		c := batch[0].Item.(*call)
		keys, args := c.args()
		c.res = s.evalsha(c.Ctx, c.script, keys, args)
		return
	}
	ctx, stop := batchContext(batch)
	defer stop()
	var runs [][]*call
	n := 0 // the requests of the last run
	for _, qc := range batch {
		c := qc.Item.(*call)
		if len(runs) == 0 || n+c.size() > maxMerge {
			runs, n = append(runs, nil), 0
		}
		runs[len(runs)-1] = append(runs[len(runs)-1], c)
		n += c.size()
	}
	cmds := make(rueidis.Commands, len(runs))
	for i, run := range runs {
		cmds[i] = s.command(run, false)
	}
	results := s.client.DoMulti(ctx, cmds...)
	var again []int
	for i, r := range results {
		if re, ok := rueidis.IsRedisErr(r.Error()); ok && re.IsNoScript() {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		cmds = cmds[:0]
		for _, i := range again {
			cmds = append(cmds, s.command(runs[i], true))
		}
		for j, r := range s.client.DoMulti(ctx, cmds...) {
			results[again[j]] = r
		}
	}
	for i, run := range runs {
		if len(run) == 1 {
			run[0].res = results[i]
			continue
		}
		split(run, results[i])
	}
}

// command returns the script call deciding run: EVALSHA, or EVAL if eval
// is set. A run of one call is that call's own script; of more, one call
// of algorithms.MultiScript with a group each.
func (s *Store) command(run []*call, eval bool) rueidis.Completed {
	var script *algorithms.Script
	var keys, args []string
	if len(run) == 1 {
		script = run[0].script
		keys, args = run[0].args()
	} else {
		script = algorithms.MultiScript()
		n := 0
		for _, c := range run {
			n += c.size()
		}
		keys = make([]string, 0, n)
		var m redisscript.Merge
		m.Grow(n)
		for _, c := range run {
			if c.keys == nil {
				keys = append(keys, c.key)
			} else {
				keys = append(keys, c.keys...)
			}
			m.Add(c.req, c.algs)
		}
		packed, algs, groups := m.Args()
		args = []string{packed, algs, groups}
	}
	if eval {
		return s.client.B().Eval().Script(script.Source()).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	}
	return s.client.B().Evalsha().Sha1(script.Hash()).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}

// split hands each call of a merged run its part of the run's packed
// reply, ten numbers a request, or the reply's error.
func split(run []*call, res rueidis.RedisResult) {
	n := 0
	for _, c := range run {
		n += c.size()
	}
	reply, err := res.ToString()
	switch {
	case rueidis.IsRedisNil(err):
		err = fmt.Errorf("%w: no reply", redisscript.ErrMalformed)
	case err != nil && res.Error() == nil: // a reply of the wrong type
		err = fmt.Errorf("%w: %w", redisscript.ErrMalformed, err)
	case err == nil:
		err = redisscript.Check(reply, n)
	}
	for _, c := range run {
		if err != nil {
			c.err = err
			continue
		}
		c.reply, reply = redisscript.Cut(reply, c.size())
	}
}

// batchContext returns the context of a batch of calls: the values of its
// first caller's context, ending once every caller's has ended. Contexts
// that end at a deadline end the batch at the last of them, without
// registering with each; a context that ends without one (a breaker's
// ends on the process's clock) is watched. A caller whose context never
// ends leaves the batch unbounded but for the client's own timeouts. stop
// releases what the context holds.
func batchContext(batch []*callqueue.Call) (ctx context.Context, stop func()) {
	ctx = context.WithoutCancel(batch[0].Ctx)
	var last time.Time
	var watched []context.Context
	for _, c := range batch {
		if d, ok := c.Ctx.Deadline(); ok {
			if d.After(last) {
				last = d
			}
			continue
		}
		if c.Ctx.Done() == nil {
			return ctx, func() {}
		}
		watched = append(watched, c.Ctx)
	}
	if len(watched) == 0 {
		return context.WithDeadline(ctx, last)
	}
	ctx, cancel := context.WithCancel(ctx)
	var left atomic.Int64
	left.Store(int64(len(watched)))
	end := func() {
		if left.Add(-1) == 0 {
			cancel()
		}
	}
	stops := make([]func() bool, 0, len(watched)+1)
	if !last.IsZero() {
		left.Add(1)
		t := time.AfterFunc(time.Until(last), end)
		stops = append(stops, t.Stop)
	}
	for _, c := range watched {
		stops = append(stops, context.AfterFunc(c, end))
	}
	return ctx, func() {
		for _, s := range stops {
			s()
		}
		cancel()
	}
}
