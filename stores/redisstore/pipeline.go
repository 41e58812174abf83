package redisstore

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
)

// maxPipelines is how many pipelines a store keeps in flight at once.
const maxPipelines = 4

// pipeliner sends the commands of concurrent callers together. Callers
// queue their commands; up to maxPipelines senders, each a goroutine that
// lives only while the queue has work, take the whole queue and send it as
// one pipeline. Under load a batch holds what arrived during the previous
// round trip, so a round trip carries many decisions.
type pipeliner struct {
	client redis.UniversalClient

	mu      sync.Mutex
	queue   []*call
	senders int
	closed  bool
	wg      sync.WaitGroup // the senders
}

// do sends c's command in a pipeline and returns its reply, or ctx's error
// if ctx ends first. A command whose ctx has ended by the time its batch
// is written is not sent; one already written may still be applied.
func (p *pipeliner) do(ctx context.Context, c *call) (any, error) {
	c.ctx, c.done = ctx, make(chan struct{})
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, core.ErrClosed
	}
	p.queue = append(p.queue, c)
	if p.senders < maxPipelines {
		p.senders++
		p.wg.Add(1)
		go p.send()
	}
	p.mu.Unlock()
	select {
	case <-c.done:
		return c.cmd.Result()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// send sends the queue, batch after batch, until it finds it empty.
func (p *pipeliner) send() {
	defer p.wg.Done()
	var batch, live []*call
	for {
		p.mu.Lock()
		batch, p.queue = p.queue, batch[:0]
		if len(batch) == 0 {
			p.senders--
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		live = p.sendBatch(batch, live[:0])
		for i, c := range batch {
			close(c.done)
			batch[i] = nil
		}
	}
}

// sendBatch sends, as one pipeline, the commands of batch whose callers
// still wait. It gathers them in live, and returns it for the next batch.
//
// A batch is not any one caller's. It runs without its callers' deadlines,
// bounded by the client's ReadTimeout and WriteTimeout, so that a caller
// giving up at a deadline of a few milliseconds leaves its call to the
// batch and does not cost the connection (go-redis closes the connection
// of a call that timed out). It runs with the values of its first
// caller's context, so that the client's hooks (redisotel's spans) see the
// pipeline in the trace of the first caller who waited for it, and a lone
// caller's in its own.
func (p *pipeliner) sendBatch(batch, live []*call) []*call {
	for _, c := range batch {
		// A caller that gave up has been told its call failed: it must
		// not be charged, and a Redis that was slow must not be sent
		// every call abandoned while it was.
		if err := c.ctx.Err(); err != nil {
			c.cmd.SetErr(err)
			continue
		}
		live = append(live, c)
	}
	if len(live) > 0 {
		ctx := context.WithoutCancel(live[0].ctx)
		pipe := p.client.Pipeline()
		for _, c := range live {
			_ = pipe.Process(ctx, &c.cmd)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			// go-redis gives each command its own reply or error, but
			// for an error reply to the connection's handshake (a wrong
			// password): that is the pipeline's error alone.
			for _, c := range live {
				if c.cmd.Err() == nil && c.cmd.Val() == nil {
					c.cmd.SetErr(err)
				}
			}
		}
	}
	clear(live) // the calls belong to their callers
	return live
}

// close stops new commands and waits for the senders to finish.
func (p *pipeliner) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.wg.Wait()
}
