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
	var batch []*call
	for {
		p.mu.Lock()
		batch, p.queue = p.queue, batch[:0]
		if len(batch) == 0 {
			p.senders--
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		// A batch is not any one caller's: it runs on a context of its
		// own, bounded by the client's timeouts, while each caller waits
		// on its own.
		pipe := p.client.Pipeline()
		for _, c := range batch {
			// A caller that gave up has been told its call failed: it
			// must not be charged, and a Redis that was slow must not be
			// sent every call abandoned while it was.
			if err := c.ctx.Err(); err != nil {
				c.cmd.SetErr(err)
				continue
			}
			_ = pipe.Process(context.Background(), &c.cmd)
		}
		if pipe.Len() > 0 {
			_, _ = pipe.Exec(context.Background())
		}
		for i, c := range batch {
			close(c.done)
			batch[i] = nil
		}
	}
}

// close stops new commands and waits for the senders to finish.
func (p *pipeliner) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.wg.Wait()
}
