package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/internal/callqueue"
	"github.com/sluicehq/sluice/internal/redisscript"
)

// maxBatch is the most requests one merged call of
// algorithms.MultiScript decides (a larger stack goes alone). Redis runs
// nothing else while a script runs: 128 decisions take it a few hundred
// µs.
const maxBatch = 128

// pipeliner sends the commands of concurrent callers together, a batch
// of its queue (internal/callqueue) as one pipeline. On one Redis node
// (merges set) a batch's decisions and stacks go as one script call,
// algorithms.MultiScript, a group each, rather than a call each: Redis
// spends less on a decision that way (see docs/redis.md).
type pipeliner struct {
	client redis.UniversalClient
	merges bool
	queue  callqueue.Queue
}

// do sends c's command in a pipeline and returns its reply, or ctx's error
// if ctx ends first. A command whose ctx has ended by the time its batch
// is written is not sent; one already written may still be applied.
func (p *pipeliner) do(ctx context.Context, c *call) (any, error) {
	c.Item = c
	if err := p.queue.Do(ctx, &c.Call); err != nil {
		return nil, err
	}
	return c.cmd.Result()
}

// send sends, as one pipeline, a batch of calls whose callers still wait.
//
// A batch is not any one caller's. It runs without its callers' deadlines,
// bounded by the client's ReadTimeout and WriteTimeout, so that a caller
// giving up at a deadline of a few milliseconds leaves its call to the
// batch and does not cost the connection (go-redis closes the connection
// of a call that timed out). It runs with the values of its first
// caller's context, so that the client's hooks (redisotel's spans) see the
// pipeline in the trace of the first caller who waited for it, and a lone
// caller's in its own.
func (p *pipeliner) send(batch []*callqueue.Call) {
	ctx := context.WithoutCancel(batch[0].Ctx)
	var merged []*merge
	pipe := p.client.Pipeline()
	for _, qc := range batch {
		c := qc.Item.(*call)
		c.merged = false
		if !p.merges || c.algs == "" || c.size() > maxBatch || len(batch) == 1 {
			_ = pipe.Process(ctx, &c.cmd)
			continue
		}
		if n := len(merged); n > 0 && merged[n-1].fits(c) {
			merged[n-1].add(c)
			continue
		}
		m := &merge{}
		m.add(c)
		merged = append(merged, m)
	}
	for _, m := range merged {
		m.process(ctx, pipe)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		// go-redis gives each command its own reply or error, but for an
		// error reply to the connection's handshake (a wrong password):
		// that is the pipeline's error alone.
		for _, qc := range batch {
			if c := qc.Item.(*call); c.cmd.Err() == nil && c.cmd.Val() == nil && !c.merged {
				c.cmd.SetErr(err)
			}
		}
		for _, m := range merged {
			if m.cmd.Cmd != nil && m.cmd.Err() == nil && m.cmd.Val() == nil {
				m.cmd.SetErr(err)
			}
		}
	}
	p.split(ctx, merged)
}

// merge is the calls of a batch sent as one call of algorithms.MultiScript,
// a group each, or, for one call, its own command.
type merge struct {
	calls []*call
	n     int     // the requests of the calls
	cmd   noRetry // the MultiScript call, for two calls or more
}

// fits reports whether the merge takes c.
func (m *merge) fits(c *call) bool { return m.n+c.size() <= maxBatch }

// add adds c to the merge.
func (m *merge) add(c *call) {
	m.calls = append(m.calls, c)
	m.n += c.size()
}

// process queues the merge's command on pipe: its one call's own, or the
// MultiScript call deciding all of them.
func (m *merge) process(ctx context.Context, pipe redis.Pipeliner) {
	if len(m.calls) == 1 {
		_ = pipe.Process(ctx, &m.calls[0].cmd)
		return
	}
	args := make([]any, 0, 3+m.n+3)
	args = append(args, "evalsha", algorithms.MultiScript().Hash(), strconv.Itoa(m.n))
	var merged redisscript.Merge
	merged.Grow(m.n)
	for _, c := range m.calls {
		c.merged = true
		if c.keys == nil {
			args = append(args, &c.key)
		} else {
			for j := range c.keys {
				args = append(args, &c.keys[j])
			}
		}
		merged.Add(c.req, c.algs)
	}
	packed, algs, groups := merged.Args()
	args = append(args, packed, algs, groups)
	m.cmd = noRetry{redis.NewCmd(ctx, args...)}
	_ = pipe.Process(ctx, &m.cmd)
}

// split hands each merged call its part of its MultiScript call's reply,
// or the call's error, after sending again with EVAL the calls that found
// Redis without the script (once after a restart or SCRIPT FLUSH; a
// missing script ran nothing).
func (p *pipeliner) split(ctx context.Context, merged []*merge) {
	var missing []*merge
	for _, m := range merged {
		if m.cmd.Cmd != nil && redis.HasErrorPrefix(m.cmd.Err(), "NOSCRIPT") {
			missing = append(missing, m)
		}
	}
	if len(missing) > 0 {
		pipe := p.client.Pipeline()
		for _, m := range missing {
			args := m.cmd.Args()
			args[0], args[1] = "eval", algorithms.MultiScript().Source()
			m.cmd = noRetry{redis.NewCmd(ctx, args...)}
			_ = pipe.Process(ctx, &m.cmd)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			for _, m := range missing {
				if m.cmd.Err() == nil && m.cmd.Val() == nil {
					m.cmd.SetErr(err)
				}
			}
		}
	}
	for _, m := range merged {
		if m.cmd.Cmd == nil {
			continue // one call, which has its own reply
		}
		reply, err := m.cmd.Result()
		packed, ok := reply.(string)
		if err == nil && !ok {
			err = fmt.Errorf("%w: %d decisions: %T %v", redisscript.ErrMalformed, m.n, reply, reply)
		}
		if err == nil {
			err = redisscript.Check(packed, m.n)
		}
		for _, c := range m.calls {
			if err != nil {
				c.cmd.SetErr(err)
				continue
			}
			var part string
			part, packed = redisscript.Cut(packed, c.size())
			c.cmd.SetVal(part)
		}
	}
}
