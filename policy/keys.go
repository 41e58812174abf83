package policy

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores"
)

// Policy applies per-key policy around a store: limit overrides (tiers),
// allow and deny lists, shadow mode and a near-limit signal. Make one with
// [New]; it is safe for concurrent use, and follows core's decorator
// contract (Reset and Close are forwarded, Unwrap returns the inner store).
//
// In order, for each request: a key on the deny list is denied and one on
// the allow list is allowed, neither asking the store; otherwise the
// override, if any, picks the limit, and the inner store decides. A
// near-limit admission is then signalled, and in shadow mode a denial is
// reported as allowed.
//
// A batch ([Policy.ApplyAll], which a sluice.Stack of several rules calls)
// is treated per rule, and stays one call of the inner store: a rule whose
// key is on the deny list denies the whole batch without asking the store,
// rules on the allow list are left out of the store's batch, and the rest
// go to the store together, each under its own override.
type Policy struct {
	inner    core.Store
	limit    func(core.Request) core.Limit
	terms    *overrides // the terms built for limit's limits
	allow    func(key string) bool
	deny     func(key string) bool
	shadow   bool
	onShadow func(core.Request, core.Decision)
	nearFrac float64
	onNear   func(core.Request, core.Decision)
}

var _ core.Store = (*Policy)(nil)

// Option configures a [Policy].
type Option interface{ apply(*Policy) error }

type policyOption func(*Policy) error

func (f policyOption) apply(p *Policy) error { return f(p) }

// WithOverride decides each request under f(req) instead of the limit it
// carries: per-key tiers ("pro:" keys get more), or limits read from
// configuration at run time. f must be deterministic for a key, so that a
// refund is made under the limit its charge was, and fast: it runs on
// every decision. A key whose limit changes keeps its state; what each
// algorithm then does with it is in docs/algorithms.md ("When a key's
// limit changes"). The terms a request is decided under with f's limit
// are built once for each pair of terms and limit (a cache of 64), so a
// decision under a limit f gave before allocates nothing.
func WithOverride(f func(req core.Request) core.Limit) Option {
	return policyOption(func(p *Policy) error {
		if f == nil {
			return fmt.Errorf("%w: WithOverride(nil)", ErrInvalidOption)
		}
		p.limit, p.terms = f, &overrides{seed: maphash.MakeSeed()}
		return nil
	})
}

// WithAllowList allows every request whose key f reports, without asking
// the store or charging anything: internal services, health checks. The
// decision is [core.Unlimited] with [core.SourceAllowList].
func WithAllowList(f func(key string) bool) Option {
	return policyOption(func(p *Policy) error {
		if f == nil {
			return fmt.Errorf("%w: WithAllowList(nil)", ErrInvalidOption)
		}
		p.allow = f
		return nil
	})
}

// WithDenyList denies every request whose key f reports, without asking
// the store: its decision has [core.SourceDenyList] and a RetryAfter of
// [core.RetryNever]. The deny list is consulted before the allow list.
func WithDenyList(f func(key string) bool) Option {
	return policyOption(func(p *Policy) error {
		if f == nil {
			return fmt.Errorf("%w: WithDenyList(nil)", ErrInvalidOption)
		}
		p.deny = f
		return nil
	})
}

// WithShadow turns on shadow mode, for rolling out a new limit: every
// request is decided (and charged when admitted) as usual, but a denial is
// reported as allowed, with [core.SourceShadow], the denial's Limit,
// Remaining and ResetAfter, and no RetryAfter. record, if not nil, is
// called with each request and the real decision it would have got, on
// the caller's goroutine.
func WithShadow(record func(req core.Request, real core.Decision)) Option {
	return policyOption(func(p *Policy) error {
		p.shadow, p.onShadow = true, record
		return nil
	})
}

// WithNearLimit marks each admission that leaves less than fraction
// (0 < fraction ≤ 1) of the decision's Limit as near the limit
// ([core.Decision].Near): a client about to be limited, worth a warning
// header or a log line. Package telemetry counts marked decisions in
// ratelimit.near_limit. signal, if not nil, is called with each such
// admission, on the caller's goroutine. Charges and reservations are
// marked; peeks and refunds never are.
func WithNearLimit(fraction float64, signal func(req core.Request, d core.Decision)) Option {
	return policyOption(func(p *Policy) error {
		if !(fraction > 0 && fraction <= 1) {
			return fmt.Errorf("%w: WithNearLimit(%v): want a fraction in (0, 1]", ErrInvalidOption, fraction)
		}
		p.nearFrac, p.onNear = fraction, signal
		return nil
	})
}

// New returns inner with the given policy applied. It fails with an error
// wrapping [ErrInvalidOption] for an option it cannot use.
func New(inner core.Store, opts ...Option) (*Policy, error) {
	if inner == nil {
		return nil, core.ErrNoStore
	}
	p := &Policy{inner: inner}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", ErrInvalidOption)
		}
		if err := o.apply(p); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Apply decides req under the policy (see [Policy]).
func (p *Policy) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	if d, decided := p.before(&req); decided {
		// The policy answers itself, so it validates; otherwise the
		// store does.
		if err := req.Validate(); err != nil {
			return core.Decision{}, err
		}
		p.after(&req, &d)
		return d, nil
	}
	d, err := p.inner.Apply(ctx, req)
	if err != nil {
		return d, err
	}
	p.near(&req, &d)
	p.after(&req, &d)
	return d, nil
}

// ApplyAll decides reqs together under the policy, each request as Apply
// would: a key on the deny list denies the whole batch without asking the
// store (the requests it did not ask about are reported allowed, with
// [core.SourceDenyList] and no Limit known); keys on the allow list are
// allowed and left out of the store's batch; the others go to the store
// in one call (ApplyAll, or Apply for one request), under their
// overrides. The near-limit signal is given for each rule of a batch the
// store admitted, as no rule of a denied batch was charged; in shadow
// mode every denial is reported as allowed.
func (p *Policy) ApplyAll(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	if p.limit == nil && !p.listed(reqs) {
		// Nothing to change in the batch: pass it on as it is, with no
		// copy.
		if err := p.inner.ApplyAll(ctx, reqs, out); err != nil {
			return err
		}
		admitted := true
		for i := range out {
			admitted = admitted && out[i].Allowed
		}
		for i := range reqs {
			if admitted {
				p.near(&reqs[i], &out[i])
			}
			p.after(&reqs[i], &out[i])
		}
		return nil
	}
	if len(reqs) == 0 || len(out) != len(reqs) {
		return stores.ValidateAll(reqs, out) // which says what is wrong
	}
	all := append([]core.Request(nil), reqs...) // under their overrides
	rs := make([]core.Request, 0, len(reqs))
	at := make([]int, 0, len(reqs))
	denied, listed := false, false
	for i := range all {
		d, decided := p.before(&all[i])
		out[i] = d
		if !decided {
			rs, at = append(rs, all[i]), append(at, i)
		} else {
			denied, listed = denied || !d.Allowed, true
		}
	}
	if listed {
		// The policy answers some of the batch itself: it validates the
		// batch, as a store would.
		if err := stores.ValidateAll(all, out); err != nil {
			return err
		}
	}
	switch {
	case denied:
		for _, i := range at {
			out[i] = all[i].Answer(core.Decision{Allowed: true, Source: core.SourceDenyList})
		}
	case len(rs) == 1:
		d, err := p.inner.Apply(ctx, rs[0])
		if err != nil {
			return err
		}
		out[at[0]] = d
	case len(rs) > 1:
		ds := make([]core.Decision, len(rs))
		if err := p.inner.ApplyAll(ctx, rs, ds); err != nil {
			return err
		}
		for j, i := range at {
			out[i] = ds[j]
		}
	}
	admitted := !denied
	for _, i := range at {
		admitted = admitted && out[i].Allowed
	}
	if admitted {
		for j, i := range at {
			p.near(&rs[j], &out[i])
		}
	}
	for i := range all {
		p.after(&all[i], &out[i])
	}
	return nil
}

// listed reports whether a request's key is on the deny or the allow list.
func (p *Policy) listed(reqs []core.Request) bool {
	for i := range reqs {
		if p.deny != nil && p.deny(reqs[i].Key) || p.allow != nil && p.allow(reqs[i].Key) {
			return true
		}
	}
	return false
}

// before answers req from the deny and allow lists, reporting whether it
// did, and otherwise applies the override to req. An answer is the
// policy's own: the caller validates req before giving it.
func (p *Policy) before(req *core.Request) (core.Decision, bool) {
	switch {
	case p.deny != nil && p.deny(req.Key):
		return req.Answer(core.Decision{RetryAfter: core.RetryNever, Source: core.SourceDenyList}), true
	case p.allow != nil && p.allow(req.Key):
		d := core.Unlimited()
		d.Source = core.SourceAllowList
		return req.Answer(d), true
	}
	if p.limit != nil && req.Terms != nil { // without terms, the store refuses it
		// Terms are shared: a limit of the override's own goes on terms
		// built for it, once.
		if lim := p.limit(*req); lim != req.Limit {
			req.Terms = p.terms.under(req.Terms, lim)
		}
	}
	return core.Decision{}, false
}

// near marks d, req's decision, if it is a near-limit admission, and
// signals it. The decisions of this and after are changed in place:
// a Decision is too large to pass and return by value at every step.
func (p *Policy) near(req *core.Request, d *core.Decision) {
	if p.nearFrac > 0 && d.Allowed && (req.Op == core.OpCharge || req.Op == core.OpReserve || req.Op == core.OpAtMost) &&
		d.Limit > 0 && float64(d.Remaining) < p.nearFrac*float64(d.Limit) {
		d.Near = true
		if p.onNear != nil {
			p.onNear(*req, *d)
		}
	}
}

// after rewrites d, req's decision, as allowed if it is a denial in
// shadow mode.
func (p *Policy) after(req *core.Request, d *core.Decision) {
	if !p.shadow || d.Allowed {
		return
	}
	if p.onShadow != nil {
		p.onShadow(*req, *d)
	}
	s := core.Decision{Allowed: true, Limit: d.Limit, Remaining: d.Remaining, Level: d.Level, ResetAfter: d.ResetAfter, At: d.At, Source: core.SourceShadow, Healed: d.Healed}
	if req.Op == core.OpAtMost {
		s.Admitted = req.Cost // passed whole, as a charge is: the caller acts on all of it
	}
	*d = s
}

// Reset forwards to the inner store.
func (p *Policy) Reset(ctx context.Context, key string, alg core.Algorithm) error {
	return p.inner.Reset(ctx, key, alg)
}

// Close closes the inner store; the policy holds nothing of its own.
func (p *Policy) Close() error {
	if err := p.inner.Close(); err != nil && !errors.Is(err, core.ErrClosed) {
		return err
	}
	return nil
}

// Unwrap returns the inner store.
func (p *Policy) Unwrap() core.Store { return p.inner }
