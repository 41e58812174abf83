package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/core"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Option configures an [Interceptor]. Options are made by the With
// functions of this package.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type policy struct {
	name string
	lim  *core.Limiter
}

type config struct {
	name   string
	more   []policy
	v4, v6 int
	settings
}

// settings are the options an [Interceptor] keeps as they were given.
type settings struct {
	key      KeyFunc
	cost     CostFunc
	failOpen bool
	shadow   bool
	onError  ErrorFunc
}

// WithPolicyName names the limiter given to [New] in status details
// (QuotaFailure's quota_id and subject). The default is "default".
func WithPolicyName(name string) Option {
	return optionFunc(func(c *config) { c.name = name })
}

// WithLimiter adds a further limiter, applied after the one given to [New]
// and any added before it, under the policy name name. Every limiter is
// charged the same key and cost, in order, and the first denial answers.
// Until sluice decides several limits atomically, a call denied by a
// later limiter has already been charged by the earlier ones.
func WithLimiter(name string, lim *core.Limiter) Option {
	return optionFunc(func(c *config) { c.more = append(c.more, policy{name, lim}) })
}

// WithKeyFunc sets how a call's key is found. The default is the peer's
// address ([PeerKey] with the prefix lengths of [WithIPv4Prefix] and
// [WithIPv6Prefix]).
func WithKeyFunc(f KeyFunc) Option {
	return optionFunc(func(c *config) { c.key = f })
}

// WithIPv4Prefix sets the prefix length, 1 to 32, the default key function
// keys IPv4 peers by. The default is 32.
func WithIPv4Prefix(bits int) Option {
	return optionFunc(func(c *config) { c.v4 = bits })
}

// WithIPv6Prefix sets the prefix length, 1 to 128, the default key function
// keys IPv6 peers by. The default is 64.
func WithIPv6Prefix(bits int) Option {
	return optionFunc(func(c *config) { c.v6 = bits })
}

// CostFunc returns how much of the limit a call to fullMethod uses. A cost
// of 0 is free; a cost below zero or above [core.MaxUnits] is a bug, and
// the call fails with codes.Unavailable like a store failure.
type CostFunc func(ctx context.Context, fullMethod string) int64

// WithCost sets the cost of each call. The default charges 1. A stream is
// charged once, when it starts.
func WithCost(f CostFunc) Option {
	return optionFunc(func(c *config) { c.cost = f })
}

// CostByMethod returns a [CostFunc] that charges costs[fullMethod], or def
// for a method not in costs.
func CostByMethod(costs map[string]int64, def int64) CostFunc {
	m := make(map[string]int64, len(costs))
	for k, v := range costs {
		m[k] = v
	}
	return func(_ context.Context, method string) int64 {
		if v, ok := m[method]; ok {
			return v
		}
		return def
	}
}

// WithFailOpen lets calls through when a store fails, instead of failing
// them with codes.Unavailable. A decision a failure policy made
// fail-closed ([core.SourceFailClosed]) still fails the call.
func WithFailOpen() Option {
	return optionFunc(func(c *config) { c.failOpen = true })
}

// ErrFailClosed is the error an [ErrorFunc] sees for a call a failure
// policy denied because its store was down ([core.SourceFailClosed]).
var ErrFailClosed = errors.New("grpclimit: the store is down and its policy failed closed")

// ErrorFunc observes a failure of the limiter for a call to method: a
// store's error, [ErrFailClosed], or an invalid cost from a [CostFunc]
// (wrapping [core.ErrInvalidCost]). It must be safe for concurrent use.
type ErrorFunc func(ctx context.Context, method string, err error)

// WithErrorHandler calls f with every failure of the limiter, before the
// call is failed with codes.Unavailable (or served, under [WithFailOpen]
// or [WithShadow]), so that a store outage can be logged and counted. The
// client is never told the error. The default does nothing.
func WithErrorHandler(f ErrorFunc) Option {
	return optionFunc(func(c *config) { c.onError = f })
}

// WithShadow turns enforcement off: every call is passed to the handler,
// whatever the limiters decide or however their stores fail.
func WithShadow() Option {
	return optionFunc(func(c *config) { c.shadow = true })
}

// Interceptor limits the calls a gRPC server serves: [Interceptor.Unary]
// and [Interceptor.Stream] return its server interceptors. Make one with
// [New]; it is safe for concurrent use.
type Interceptor struct {
	policies []policy
	settings
}

// New returns an interceptor that charges each call to lim, and to the
// limiters of [WithLimiter] options after it. It reports a nil limiter, an
// empty or repeated policy name and a prefix length out of range.
func New(lim *core.Limiter, opts ...Option) (*Interceptor, error) {
	c := config{name: "default", v4: 32, v6: 64}
	for _, o := range opts {
		o.apply(&c)
	}
	in := &Interceptor{settings: c.settings}
	peerKey, err := PeerKey(c.v4, c.v6)
	if err != nil {
		return nil, err
	}
	if in.key == nil {
		in.key = peerKey
	}
	for _, p := range append([]policy{{c.name, lim}}, c.more...) {
		switch {
		case p.lim == nil:
			return nil, fmt.Errorf("grpclimit: policy %q has a nil limiter", p.name)
		case p.name == "":
			return nil, errors.New("grpclimit: empty policy name")
		}
		for _, q := range in.policies {
			if q.name == p.name {
				return nil, fmt.Errorf("grpclimit: two policies named %q", p.name)
			}
		}
		in.policies = append(in.policies, p)
	}
	return in, nil
}

// Unary returns the unary server interceptor, for [grpc.UnaryInterceptor]
// or [grpc.ChainUnaryInterceptor].
func (in *Interceptor) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := in.decide(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// Stream returns the stream server interceptor, for
// [grpc.StreamInterceptor] or [grpc.ChainStreamInterceptor]. A stream is
// charged once, when it starts; its messages are not counted.
func (in *Interceptor) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := in.decide(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// decide charges a call and returns nil to serve it, or the status error
// to fail it with.
func (in *Interceptor) decide(ctx context.Context, method string) error {
	key, err := in.key(ctx, method)
	if err == nil {
		if err = core.ValidateKey(key); err != nil {
			err = fmt.Errorf("%w: %w", ErrNoKey, err)
		}
	}
	if err != nil {
		if in.shadow {
			return nil
		}
		return status.Error(codes.InvalidArgument, "grpclimit: the call carries nothing to rate-limit it by")
	}
	cost := int64(1)
	if in.cost != nil {
		cost = in.cost(ctx, method)
	}
	if cost < 0 || cost > core.MaxUnits {
		in.report(ctx, method, fmt.Errorf("%w: the cost function gave %d", core.ErrInvalidCost, cost))
		return in.unavailable()
	}
	for i := range in.policies {
		p := &in.policies[i]
		d, err := p.lim.AllowN(ctx, key, cost)
		switch {
		case err != nil:
			in.report(ctx, method, fmt.Errorf("grpclimit: policy %q: %w", p.name, err))
			if in.failOpen {
				continue
			}
			return in.unavailable()
		case !d.Allowed && d.Source == core.SourceFailClosed:
			in.report(ctx, method, fmt.Errorf("policy %q: %w", p.name, ErrFailClosed))
			return in.unavailable()
		case !d.Allowed:
			if in.shadow {
				return nil
			}
			return denied(p, d, cost)
		}
	}
	return nil
}

// report passes a failure to the error handler, if there is one.
func (in *Interceptor) report(ctx context.Context, method string, err error) {
	if in.onError != nil {
		in.onError(ctx, method, err)
	}
}

func (in *Interceptor) unavailable() error {
	if in.shadow {
		return nil
	}
	return status.Error(codes.Unavailable, "grpclimit: the rate limiter's store is unavailable")
}

// denied returns the status of a call p denied with d:
// codes.ResourceExhausted with a RetryInfo (the wait rounded up to the
// millisecond, at least 1ms; none when the cost can never be admitted)
// and a QuotaFailure naming the policy.
func denied(p *policy, d core.Decision, cost int64) error {
	var msg strings.Builder
	msg.WriteString("grpclimit: rate limit ")
	msg.WriteString(strconv.Quote(p.name))
	v := &errdetails.QuotaFailure_Violation{
		Subject:     "policy:" + p.name,
		Description: p.lim.Limit().String(),
		QuotaId:     p.name,
		QuotaValue:  d.Limit,
	}
	if d.Unsatisfiable() {
		fmt.Fprintf(&msg, " admits at most %d at once; this call costs %d and will never be admitted", d.Limit, cost)
		st := status.New(codes.ResourceExhausted, msg.String())
		if s, err := st.WithDetails(&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{v}}); err == nil {
			st = s
		}
		return st.Err()
	}
	// A denial's wait is positive; one that says nothing (a decorator's
	// denial) falls back to the wait until the key is full again, and
	// never to "retry now".
	wait := d.RetryAfter
	if wait <= 0 {
		wait = d.ResetAfter
	}
	wait = max(ceilMillis(wait), time.Millisecond)
	fmt.Fprintf(&msg, " exceeded: retry in %v", wait)
	st := status.New(codes.ResourceExhausted, msg.String())
	if s, err := st.WithDetails(
		&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)},
		&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{v}},
	); err == nil {
		st = s
	}
	return st.Err()
}

// ceilMillis rounds d up to a whole number of milliseconds, so that a
// client retrying after it never retries early.
func ceilMillis(d time.Duration) time.Duration {
	if r := d % time.Millisecond; r != 0 {
		d += time.Millisecond - r
	}
	return d
}

// RetryDelay returns the delay a ResourceExhausted error from these
// interceptors (or any server sending a google.rpc.RetryInfo) asks the
// client to wait before retrying, and whether it carried one. A client
// can wait that long, or give up when it is longer than the caller's
// deadline allows.
func RetryDelay(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok {
		return 0, false
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}
