package layered

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores"
)

// allotment is a key's allotment: tokens charged to the remote in one call
// (a take) and spent here, and, when the remote could not give a whole
// allotment, how long to wait for one. Guarded by its entry's mu.
type allotment struct {
	limit   core.Limit    // the limit the tokens were taken under
	taken   int64         // the tokens taken; 0 when there are none
	left    int64         // tokens not yet spent
	at      int64         // local clock when the take was sent, ns
	expires int64         // local clock from which the tokens lapse, ns
	take    core.Decision // the remote's answer to the take
	size    int64         // the next take, adapted to what the key spends

	// wait is the key's wait after a denied take; nil while there is
	// none.
	wait *allotmentWait

	// refill is non-nil while one caller takes an allotment; it is closed
	// when the take returns. Other callers wait for it rather than send
	// takes of their own.
	refill chan struct{}
}

// allotmentWait is a key's wait after a denied take: until until (local
// ns), a request under limit waits for the remote to hold a whole
// allotment, which it will at retry; d is the take's answer, at at. Most
// keys never wait, so it is kept apart from their allotments, whose size
// it nearly doubled. Guarded by its entry's mu.
type allotmentWait struct {
	limit            core.Limit
	at, until, retry int64
	d                core.Decision
}

// Allotter is implemented by algorithms whose capacity the store may take
// from the remote a share at a time and spend locally (its allotments)
// within an exact bound: the token bucket, GCRA and the fixed window. The
// sliding windows are not: tokens charged at one instant and spent later
// weigh differently in them. The store finds it through wrappers such as
// a stack's rules (see core.AlgorithmAs), so an algorithm of your own is
// allotted if it, or an algorithm it unwraps to, implements Allotter.
type Allotter interface {
	core.Algorithm
	// MaxAllotment returns the most tokens, in units of cost, that may be
	// taken at once under l (its capacity); 0 if none may.
	MaxAllotment(l core.Limit) int64
	// Windowed reports whether capacity comes back all at once at the
	// end of an epoch-aligned window (the fixed window), so that an
	// allotment must not be spent after the window it was taken in ends;
	// a bucket's capacity comes back continuously.
	Windowed() bool
}

// maxAllotment returns alg's MaxAllotment for l, or 0 when alg is no
// Allotter.
func maxAllotment(alg core.Algorithm, l core.Limit) int64 {
	if a, ok := core.AlgorithmAs[Allotter](alg); ok {
		return a.MaxAllotment(l)
	}
	return 0
}

// windowed reports whether alg is an Allotter whose capacity comes back at
// window boundaries.
func windowed(alg core.Algorithm) bool {
	a, ok := core.AlgorithmAs[Allotter](alg)
	return ok && a.Windowed()
}

// allotmentSize returns the largest allotment to take for req, or 0 if req
// is not allotted: allotments are off, its cost is zero or above the
// allotment, it is a refund or a reservation, or its algorithm may not be
// allotted (its MaxAllotment is 0, or it is not an [Allotter]).
func (s *Store) allotmentSize(req *core.Request) int64 {
	if s.allot == nil || req.Cost <= 0 || req.Op == core.OpRefund || req.Op == core.OpReserve {
		return 0
	}
	capacity := maxAllotment(req.Algorithm, req.Limit)
	if capacity <= 0 {
		return 0
	}
	n := min(s.allot(*req), capacity)
	if n < 2 || req.Cost > n {
		return 0
	}
	return n
}

// spendAllotment decides req from the key's allotment: it spends the
// allotment's tokens, waits for another caller's take, denies while the
// remote cannot give a whole allotment, or takes one itself. ok is false
// when the allotment cannot decide (a peek with no tokens in hand, a key
// just Reset, an allotment the remote calls unsatisfiable): the caller
// then decides as without allotments. req is validated only where the
// allotment answers it here; a take hands it to the remote, which
// validates what it decides.
func (s *Store) spendAllotment(ctx context.Context, req *core.Request, sh *lru.Cache[cacheKey, *entry], k cacheKey, e *entry, most, now int64) (d core.Decision, ok bool, err error) {
	if e == nil {
		if req.Op == core.OpPeek {
			return core.Decision{}, false, nil
		}
		e = s.entry(sh, k)
	}
	for {
		e.mu.Lock()
		l := e.allotment
		switch {
		case e.dead:
			e.mu.Unlock()
			return core.Decision{}, false, nil
		case l == nil && req.Op == core.OpPeek:
			e.mu.Unlock()
			return core.Decision{}, false, nil
		case l == nil:
			l = new(allotment)
			e.allotment = l
		}
		if l.holds(req, now) {
			if err := req.Validate(); err != nil {
				e.mu.Unlock()
				return core.Decision{}, true, err
			}
			left := l.left - req.Cost
			if req.Op != core.OpPeek {
				l.left = left
			}
			d := l.decision(now, left)
			e.mu.Unlock()
			return d, true, nil
		}
		if ch := l.refill; ch != nil {
			e.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return core.Decision{}, true, fmt.Errorf("layered: waiting for an allotment: %w", ctx.Err())
			}
			now = s.now()
			continue
		}
		if l.waiting(req, now) {
			if err := req.Validate(); err != nil {
				e.mu.Unlock()
				return core.Decision{}, true, err
			}
			d := l.waitDecision(now)
			e.mu.Unlock()
			return d, true, nil
		}
		if req.Op == core.OpPeek {
			e.mu.Unlock()
			return core.Decision{}, false, nil
		}
		n := l.nextSize(req, most, now)
		ch := make(chan struct{})
		l.refill = ch
		e.mu.Unlock()
		return s.take(ctx, req, e, l, n, now, ch, true, false)
	}
}

// holds reports whether the allotment, live at now, holds req's cost
// under req's limit.
func (l *allotment) holds(req *core.Request, now int64) bool {
	return l.taken > 0 && l.limit == req.Limit && now < l.expires && l.left >= req.Cost
}

// waiting reports whether a request under req's limit waits, at now, for
// the remote to hold a whole allotment.
func (l *allotment) waiting(req *core.Request, now int64) bool {
	w := l.wait
	return w != nil && now < w.until && w.limit == req.Limit
}

// refundAllotment gives a refund back to the key's live allotment, under
// the same limit, if the allotment has spent at least its cost since its
// take: those tokens were charged to the remote with the take, so the
// allotment may spend them again, and the remote need not be asked. An
// allotment thus never holds more than it took, and what the instance
// admits, less what it refunds, stays within what the remote charged. ok
// is false when the refund is for the remote (which then validates it):
// no live allotment, another limit, or a cost above what the allotment
// spent (a refund of what another instance charged, or of more than was
// charged, which the remote bounds). An invalid refund the allotment
// would have taken fails with its error.
func (e *entry) refundAllotment(req *core.Request, now int64) (d core.Decision, ok bool, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	l := e.allotment
	if e.dead || l == nil || l.taken == 0 || l.limit != req.Limit || now >= l.expires || l.taken-l.left < req.Cost {
		return core.Decision{}, false, nil
	}
	if err := req.Validate(); err != nil {
		return core.Decision{}, true, err
	}
	l.left += req.Cost
	return l.decision(now, l.left), true, nil
}

// decision is the decision for a request spent from the allotment, leaving
// left tokens in it. Remaining counts what the remote had left after the
// take and what the allotment still holds: the key's budget as this
// instance last saw it, less what it has spent since. ResetAfter is the
// take's, run down by the time since.
func (l *allotment) decision(now, left int64) core.Decision {
	return core.Decision{
		Allowed:    true,
		Limit:      l.take.Limit,
		Remaining:  l.take.Remaining + left,
		ResetAfter: max(l.take.ResetAfter-time.Duration(now-l.at), 0),
		At:         later(l.take.At, now-l.at),
		Source:     core.SourceAllotment,
	}
}

// waitDecision is the denial of a request made while the key waits for a
// whole allotment: nothing is admitted here until then, so Remaining is 0,
// and the request will pass once the wait is over (if nothing else is
// charged).
func (l *allotment) waitDecision(now int64) core.Decision {
	w := l.wait
	d := w.d
	d.Remaining = 0
	d.RetryAfter = ceilMicros(w.retry - now)
	d.ResetAfter = max(d.ResetAfter-time.Duration(now-w.at), d.RetryAfter)
	d.At = later(d.At, now-w.at)
	d.Level = core.Level{} // the key's level has moved since: unknown
	d.Source = core.SourceCache
	return d
}

// nextSize adapts the allotment's size to what the key spent of the last
// one, and returns the tokens to take for req (at least its cost, at most
// most). An allotment spent before it lapsed doubles the size; one that
// lapsed with tokens left makes the size what was spent of it. Whatever
// the old allotment still holds (less than req's cost) lapses now.
func (l *allotment) nextSize(req *core.Request, most, now int64) int64 {
	if l.size == 0 || l.size > most {
		l.size = most
	}
	if l.taken > 0 && l.limit == req.Limit {
		switch {
		case now < l.expires:
			l.size = min(2*l.size, most)
		case l.left > 0:
			l.size = max(l.taken-l.left, 1)
		}
	}
	l.taken, l.left = 0, 0
	return max(l.size, req.Cost)
}

// take takes an allotment of n tokens for req from the remote, in one
// call, and decides req from it. ch is closed when the take has returned,
// waking the callers that waited for it. The remote validates the take,
// which is req at another cost, and so validates req.
//
// With ahead set the take is for a batch that spends the allotment
// afterwards, with the others of its keys (see allotAll): nothing is
// spent or decided here, and ok reports whether the batch may still be
// answered from allotments; false sends it to the remote.
//
// When the remote denies the take but says it holds enough for req, and
// shrink allows, take takes what the remote holds instead, once: a burst
// that spent the last allotment early must not have the requests after it
// denied while the key is under its limit. Otherwise the key waits for a
// whole allotment: until the remote says it will hold one, requests are
// denied here. This request is then decided at the remote if the denial
// says the remote still holds enough for it; otherwise it is denied with
// the take's wait.
func (s *Store) take(ctx context.Context, req *core.Request, e *entry, l *allotment, n, start int64, ch chan struct{}, shrink, ahead bool) (d core.Decision, ok bool, err error) {
	epoch := s.epoch.Load()
	treq := *req
	treq.Cost = n
	d, err = s.remote.Apply(ctx, treq)
	win := windowed(req.Algorithm)
	spend := req.Cost
	if ahead {
		spend = 0
	}

	e.mu.Lock()
	l.refill = nil
	close(ch)
	valid := s.epoch.Load() == epoch && !e.dead
	switch {
	case err != nil:
		e.mu.Unlock()
		return core.Decision{}, true, fmt.Errorf("layered: remote: %w", err)
	case d.Allowed && !valid && ahead:
		e.mu.Unlock()
		return core.Decision{}, false, nil
	case d.Allowed && !valid:
		// A Reset overlapped the take: the tokens were charged to the
		// state it forgot. This request was admitted; the rest lapses.
		e.mu.Unlock()
		d.Remaining += n - req.Cost
		d.Level.Units += (n - req.Cost) * d.Level.PerToken
		d.Source = core.SourceAllotment
		return d, true, nil
	case d.Allowed:
		l.limit, l.taken, l.left, l.at, l.take = req.Limit, n, n-spend, start, d
		l.expires = start + s.allotTTL
		if win {
			// Never spend a window's tokens in the next window.
			l.expires = min(start+s.winTTL, start+int64(d.ResetAfter))
		}
		l.wait = nil
		dec := l.decision(start, l.left)
		dec.Healed = d.Healed
		e.mu.Unlock()
		return dec, true, nil
	case d.Unsatisfiable() || d.RetryAfter <= 0:
		e.mu.Unlock()
		return core.Decision{}, false, nil
	case shrink && valid && d.Remaining >= req.Cost && d.Remaining < n:
		// The next allotment is the smaller one, and other callers wait
		// for its take as for the first.
		l.size = d.Remaining
		ch := make(chan struct{})
		l.refill = ch
		e.mu.Unlock()
		return s.take(ctx, req, e, l, d.Remaining, s.now(), ch, false, ahead)
	}
	var w *allotmentWait
	if valid {
		w = &allotmentWait{limit: req.Limit, at: start, retry: start + int64(d.RetryAfter), d: d}
		w.until = w.retry
		if s.maxDeny > 0 {
			w.until = start + min(int64(d.RetryAfter), s.maxDeny)
		}
		l.wait = w
	}
	e.mu.Unlock()
	if ahead {
		// The key now waits for a whole allotment, and the batch is
		// denied here; unless the remote holds enough for this request,
		// which it then decides, with the rest of its batch.
		return core.Decision{}, valid && d.Remaining < req.Cost, nil
	}
	if d.Remaining < req.Cost {
		return d, true, nil
	}
	// The remote holds enough for this request alone: decide it there.
	// If it is admitted, the whole allotment is that much further off.
	dd, err := s.callRemote(ctx, req)
	if err == nil && dd.Allowed && valid && !win {
		u, r := req.Limit.Units()
		later := core.CeilDiv(req.Cost*u, r) * int64(time.Microsecond)
		e.mu.Lock()
		if w != nil && l.wait == w { // the wait this take set, still in force
			w.retry += later
			w.until = w.retry
			if s.maxDeny > 0 {
				w.until = min(w.until, start+s.maxDeny)
			}
		}
		e.mu.Unlock()
	}
	return dd, true, err
}

// maxAllotRounds bounds how often allotAll takes allotments and looks
// again before it leaves a batch to the remote: other callers may spend
// what it took before it locks the keys again.
const maxAllotRounds = 3

// allotAll decides a batch of charges or peeks from its keys' allotments
// when every request of it is allotted (single requests would be: no
// explicit Now, an Allotter, a cost within the allotment). It locks the
// keys' entries in one fixed order and decides them together, as
// allotments decide a single request: if every allotment holds its
// request's cost, all are spent (a peek spends nothing); if any key
// waits for a whole allotment, the batch is denied here and nothing is
// spent. A key whose allotment is spent or lapsed takes a new one first,
// in a call of its own, as a single request would, and the batch looks
// again. ok is false when the batch is the remote's to decide: a request
// that is not allotted, a peek of a key holding no allotment, a key just
// Reset, a remote that holds enough for a request but not a whole
// allotment, or takes that keep being spent by others. The batch is
// validated only when it is answered here.
func (s *Store) allotAll(ctx context.Context, reqs []core.Request, out []core.Decision, at []slot, now int64) (ok bool, err error) {
	op := reqs[0].Op
	var mostBuf, orderBuf [4]int64
	most, order := mostBuf[:0], orderBuf[:0]
	if len(reqs) > len(mostBuf) {
		most, order = make([]int64, 0, len(reqs)), make([]int64, 0, len(reqs))
	}
	for i := range reqs {
		req := &reqs[i]
		m := int64(0)
		if req.Op == op && req.Now.IsZero() && at[i].sh != nil {
			m = s.allotmentSize(req)
		}
		if m == 0 {
			return false, nil
		}
		if at[i].e == nil {
			if op == core.OpPeek {
				return false, nil // a peek takes nothing
			}
			at[i].e = s.entry(at[i].sh, at[i].k)
		}
		most = append(most, m)
		order = append(order, int64(i))
	}
	// One fixed order of the keys, so that two batches never wait for
	// each other's locks; a key twice is an invalid batch, the remote's
	// to refuse.
	slices.SortFunc(order, func(a, b int64) int { return compareKeys(at[a].k, at[b].k) })
	for j := 1; j < len(order); j++ {
		if at[order[j]].k == at[order[j-1]].k {
			return false, nil
		}
	}
	for range maxAllotRounds {
		for _, i := range order {
			at[i].e.mu.Lock()
		}
		decided, takes, waits := s.allotLocked(reqs, out, at, most, order, now)
		for _, i := range order {
			at[i].e.mu.Unlock()
		}
		switch decided {
		case allotDecided:
			return true, nil
		case allotInvalid:
			return true, stores.ValidateAll(reqs, out)
		case allotRemote:
			return false, nil
		}
		// Take what is missing, each key in a call of its own, then wait
		// for the takes other callers have under way, and look again.
		ok = true
		for _, t := range takes {
			i := t.i
			_, took, err1 := s.take(ctx, &reqs[i], at[i].e, t.l, t.n, now, t.ch, true, true)
			ok, err = ok && took, cmp.Or(err, err1)
		}
		if err != nil || !ok {
			return false, err
		}
		for _, ch := range waits {
			select {
			case <-ch:
			case <-ctx.Done():
				return true, fmt.Errorf("layered: waiting for an allotment: %w", ctx.Err())
			}
		}
		now = s.now()
	}
	return false, nil
}

// compareKeys orders cache keys by key, then algorithm.
func compareKeys(a, b cacheKey) int {
	return cmp.Or(strings.Compare(a.key, b.key), strings.Compare(a.alg, b.alg))
}

// allotOutcome is what allotLocked made of a batch.
type allotOutcome int

const (
	allotDecided allotOutcome = iota // answered here
	allotInvalid                     // an invalid batch, answered by its error
	allotRemote                      // the remote's to decide
	allotTake                        // allotments to take or wait for first
)

// pendingTake is a take allotLocked started for a batch: n tokens for
// request i into l, whose refill is ch.
type pendingTake struct {
	i  int64
	l  *allotment
	n  int64
	ch chan struct{}
}

// allotLocked is allotAll's look at the batch, under the locks of every
// key's entry: it answers the batch when every allotment holds its
// request's cost, or when a key waits for a whole allotment; otherwise it
// starts a take for each key that needs one (marking its refill, as a
// single request's take does) and returns them, with the refills of other
// callers to wait for.
func (s *Store) allotLocked(reqs []core.Request, out []core.Decision, at []slot, most, order []int64, now int64) (allotOutcome, []pendingTake, []chan struct{}) {
	op := reqs[0].Op
	held, waiting := 0, -1
	var waits []chan struct{}
	for _, i := range order {
		e, req := at[i].e, &reqs[i]
		l := e.allotment
		switch {
		case e.dead:
			return allotRemote, nil, nil
		case l == nil && op == core.OpPeek:
			return allotRemote, nil, nil
		case l == nil:
			l = new(allotment)
			e.allotment = l
		}
		switch {
		case l.holds(req, now):
			held++
		case l.refill != nil:
			waits = append(waits, l.refill)
		case l.waiting(req, now):
			if waiting < 0 || i < int64(waiting) {
				waiting = int(i)
			}
		case op == core.OpPeek:
			return allotRemote, nil, nil
		}
	}
	if held < len(reqs) && waiting < 0 && op == core.OpPeek && len(waits) > 0 {
		return allotRemote, nil, nil // a peek waits for no take
	}
	if held == len(reqs) || waiting >= 0 {
		if stores.ValidateAll(reqs, out) != nil {
			return allotInvalid, nil, nil
		}
	}
	switch {
	case held == len(reqs):
		for _, i := range order {
			l, req := at[i].e.allotment, &reqs[i]
			left := l.left - req.Cost
			if op != core.OpPeek {
				l.left = left
			}
			out[i] = l.decision(now, left)
		}
		return allotDecided, nil, nil
	case waiting >= 0:
		// Denied: the waiting keys say until when; a key whose allotment
		// holds enough says what it would have left; a key with none is
		// reported as a batch denied from the cache reports a rule it did
		// not ask. Nothing is spent.
		when := at[waiting].e.allotment.waitDecision(now).At
		for _, i := range order {
			l, req := at[i].e.allotment, &reqs[i]
			switch {
			case l.waiting(req, now) && !l.holds(req, now):
				out[i] = l.waitDecision(now)
			case l.holds(req, now):
				out[i] = l.decision(now, l.left-req.Cost)
			default:
				out[i] = core.Decision{Allowed: true, At: when, Source: core.SourceCache}
			}
		}
		return allotDecided, nil, nil
	}
	var takes []pendingTake
	for _, i := range order {
		l, req := at[i].e.allotment, &reqs[i]
		if l.holds(req, now) || l.refill != nil {
			continue
		}
		ch := make(chan struct{})
		takes = append(takes, pendingTake{i: i, l: l, n: l.nextSize(req, most[i], now), ch: ch})
		l.refill = ch
	}
	return allotTake, takes, waits
}
