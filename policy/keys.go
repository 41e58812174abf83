package policy

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/sluicehq/sluice/core"
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
type Policy struct {
	inner    core.Store
	limit    func(core.Request) core.Limit
	allow    func(key string) bool
	deny     func(key string) bool
	shadow   bool
	onShadow func(core.Request, core.Decision)
	near     float64
	onNear   func(core.Request, core.Decision)
}

var (
	_ core.Store    = (*Policy)(nil)
	_ core.Resetter = (*Policy)(nil)
	_ io.Closer     = (*Policy)(nil)
)

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
// limit changes").
func WithOverride(f func(req core.Request) core.Limit) Option {
	return policyOption(func(p *Policy) error {
		if f == nil {
			return fmt.Errorf("%w: WithOverride(nil)", ErrInvalidOption)
		}
		p.limit = f
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

// WithNearLimit calls signal, on the caller's goroutine, after each
// admission that leaves less than fraction (0 < fraction ≤ 1) of the
// decision's Limit: a client about to be limited, worth a warning header
// or a log line. Telemetry counts the same in ratelimit.near_limit.
func WithNearLimit(fraction float64, signal func(req core.Request, d core.Decision)) Option {
	return policyOption(func(p *Policy) error {
		if !(fraction > 0 && fraction <= 1) || signal == nil {
			return fmt.Errorf("%w: WithNearLimit(%v, %p): want a fraction in (0, 1] and a function", ErrInvalidOption, fraction, signal)
		}
		p.near, p.onNear = fraction, signal
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
	var d core.Decision
	switch {
	case p.deny != nil && p.deny(req.Key):
		if err := req.Validate(); err != nil {
			return core.Decision{}, err
		}
		d = core.Decision{RetryAfter: core.RetryNever, Source: core.SourceDenyList}
	case p.allow != nil && p.allow(req.Key):
		if err := req.Validate(); err != nil {
			return core.Decision{}, err
		}
		d = core.Unlimited()
		d.Source = core.SourceAllowList
		return d, nil
	default:
		if p.limit != nil {
			req.Limit = p.limit(req)
		}
		var err error
		if d, err = p.inner.Apply(ctx, req); err != nil {
			return d, err
		}
		if p.onNear != nil && d.Allowed && d.Limit > 0 && float64(d.Remaining) < p.near*float64(d.Limit) {
			p.onNear(req, d)
		}
	}
	if p.shadow && !d.Allowed {
		if p.onShadow != nil {
			p.onShadow(req, d)
		}
		d = core.Decision{Allowed: true, Limit: d.Limit, Remaining: d.Remaining, ResetAfter: d.ResetAfter, Source: core.SourceShadow}
	}
	return d, nil
}

// Reset forwards to the inner store (see [core.Resetter]).
func (p *Policy) Reset(ctx context.Context, key string, alg core.Algorithm) error {
	r, ok := p.inner.(core.Resetter)
	if !ok {
		return fmt.Errorf("%w: %T has no Reset", core.ErrUnsupported, p.inner)
	}
	return r.Reset(ctx, key, alg)
}

// Close closes the inner store if it is an [io.Closer]; the policy holds
// nothing of its own.
func (p *Policy) Close() error {
	if c, ok := p.inner.(io.Closer); ok {
		if err := c.Close(); err != nil && !errors.Is(err, core.ErrClosed) {
			return err
		}
	}
	return nil
}

// Unwrap returns the inner store.
func (p *Policy) Unwrap() core.Store { return p.inner }
