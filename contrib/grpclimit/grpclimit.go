package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
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

// ruleKey is a key function given to one rule by [WithKey].
type ruleKey struct {
	rule string
	key  KeyFunc
}

type config struct {
	keys   []ruleKey // WithKey, in the order given
	v4, v6 int
	nowSet bool // WithNow given
	settings
}

// settings are the options an [Interceptor] keeps as they were given.
type settings struct {
	key     KeyFunc // the default key function
	cost    CostFunc
	onError ErrorFunc
	now     func() time.Time // WithNow; nil: the store's clock
}

// WithKey sets how a call's key is found for the stack's rule named rule:
// per user from metadata ([MetadataKey]) or an authenticated identity (a
// [KeyFunc] of your own), everyone together with [GlobalKey]. A rule
// without WithKey is keyed by the default key function ([WithKeyFunc]).
// [New] reports a rule the stack lacks, a rule given two key functions,
// and a nil f.
func WithKey(rule string, f KeyFunc) Option {
	return optionFunc(func(c *config) { c.keys = append(c.keys, ruleKey{rule, f}) })
}

// WithKeyFunc sets the default key function, which keys every rule not
// given one by [WithKey]. The default is the peer's address ([PeerKey]
// with the prefix lengths of [WithIPv4Prefix] and [WithIPv6Prefix]).
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

// CostFunc returns how much of the limit a call to fullMethod uses, under
// every rule of the stack. A cost of 0 is free; a cost below zero or
// above [core.MaxUnits] is a bug, and the call fails with
// codes.Unavailable like a store failure.
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

// ErrFailClosed is the error an [ErrorFunc] sees for a call the stack's
// failure policy denied because its store was down
// ([core.SourceFailClosed]).
var ErrFailClosed = errors.New("grpclimit: the store is down and its policy failed closed")

// ErrInvalidOption reports a configuration [New] cannot use; the error
// says which and why.
var ErrInvalidOption = errors.New("grpclimit: invalid option")

// ErrorFunc observes a failure of the limiter for a call to method: a
// store's error, [ErrFailClosed], or an invalid cost from a [CostFunc]
// (wrapping [core.ErrInvalidCost]). It must be safe for concurrent use.
type ErrorFunc func(ctx context.Context, method string, err error)

// WithErrorHandler calls f with every failure of the limiter, before the
// call is failed with codes.Unavailable, so that a store outage can be
// logged and counted. The client is never told the error. The default
// does nothing.
func WithErrorHandler(f ErrorFunc) Option {
	return optionFunc(func(c *config) { c.onError = f })
}

// WithNow makes the interceptor decide each call at the instant now
// returns, through [sluice.Stack.At], instead of on the store's clock: a
// test steps a clock of its own and asserts at exact instants, on any
// store. The default decides on the store's clock. Deciding each call at
// now costs an allocation; it is meant for tests and replays, not for a
// fleet, whose instances' clocks disagree where the store's does not.
// [New] fails for a nil now.
func WithNow(now func() time.Time) Option {
	return optionFunc(func(c *config) { c.now, c.nowSet = now, true })
}

// rule is one rule of the interceptor's stack.
type rule struct {
	name  string
	limit string  // the limit, as QuotaFailure's description
	key   KeyFunc // nil: the default key function
}

// Interceptor limits the calls a gRPC server serves with a [sluice.Stack]:
// [Interceptor.Unary] and [Interceptor.Stream] return its server
// interceptors. Make one with [New]; it is safe for concurrent use.
type Interceptor struct {
	stack  *sluice.Stack
	rules  []rule
	leases bool // a rule holds concurrency leases
	settings
}

// New returns an interceptor that charges each call to every rule of
// stack, all or nothing, each rule on the key its key function finds
// ([WithKey]; the default key function, [WithKeyFunc], for the others).
// If the stack has a concurrency rule ([core.Leases]), the call's slots
// are held while its handler runs.
//
// New fails with an error wrapping [ErrInvalidOption] for a nil stack, a
// [WithKey] naming a rule the stack lacks (or naming one twice, or with a
// nil function), and a prefix length out of range.
func New(stack *sluice.Stack, opts ...Option) (*Interceptor, error) {
	if stack == nil {
		return nil, fmt.Errorf("%w: nil stack", ErrInvalidOption)
	}
	c := config{v4: 32, v6: 64}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", ErrInvalidOption)
		}
		o.apply(&c)
	}
	if c.nowSet && c.now == nil {
		return nil, fmt.Errorf("%w: WithNow(nil)", ErrInvalidOption)
	}
	in := &Interceptor{stack: stack, settings: c.settings}
	peerKey, err := PeerKey(c.v4, c.v6)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	if in.key == nil {
		in.key = peerKey
	}
	for _, r := range stack.Rules() {
		in.rules = append(in.rules, rule{name: r.Name, limit: r.Limit.String()})
		in.leases = in.leases || core.Leases(r.Algorithm)
	}
	for _, k := range c.keys {
		i := in.rule(k.rule)
		switch {
		case i < 0:
			names := make([]string, len(in.rules))
			for j := range in.rules {
				names[j] = strconv.Quote(in.rules[j].name)
			}
			return nil, fmt.Errorf("%w: WithKey(%q): the stack has no such rule (its rules: %s)", ErrInvalidOption, k.rule, strings.Join(names, ", "))
		case k.key == nil:
			return nil, fmt.Errorf("%w: WithKey(%q): nil key function", ErrInvalidOption, k.rule)
		case in.rules[i].key != nil:
			return nil, fmt.Errorf("%w: WithKey(%q) is given twice", ErrInvalidOption, k.rule)
		}
		in.rules[i].key = k.key
	}
	return in, nil
}

// rule returns the index of the rule named name, or -1.
func (in *Interceptor) rule(name string) int {
	for i := range in.rules {
		if in.rules[i].name == name {
			return i
		}
	}
	return -1
}

// Unary returns the unary server interceptor, for [grpc.UnaryInterceptor]
// or [grpc.ChainUnaryInterceptor]. A concurrency rule's slots are held
// until the handler returns or panics (the panic goes on).
func (in *Interceptor) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		lease, err := in.decide(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		if lease != nil {
			defer lease.Release(ctx)
		}
		return handler(ctx, req)
	}
}

// Stream returns the stream server interceptor, for
// [grpc.StreamInterceptor] or [grpc.ChainStreamInterceptor]. A stream is
// charged once, when it starts; its messages are not counted. A
// concurrency rule's slots are held until the stream's handler returns or
// panics (the panic goes on).
func (in *Interceptor) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		lease, err := in.decide(ctx, info.FullMethod)
		if err != nil {
			return err
		}
		if lease != nil {
			defer lease.Release(ctx)
		}
		return handler(srv, ss)
	}
}

// keys returns the call's key under each rule in buf, grown if need be,
// calling the default key function at most once.
func (in *Interceptor) keys(ctx context.Context, method string, buf []string) ([]string, error) {
	keys := buf[:0]
	if cap(keys) < len(in.rules) {
		keys = make([]string, 0, len(in.rules))
	}
	keys = keys[:len(in.rules)]
	var dflt string
	for i := range in.rules {
		f := in.rules[i].key
		if f == nil && dflt != "" {
			keys[i] = dflt
			continue
		}
		if f == nil {
			f = in.key
		}
		k, err := f(ctx, method)
		if err != nil {
			return nil, fmt.Errorf("rule %q: %w", in.rules[i].name, err)
		}
		if in.rules[i].key == nil {
			dflt = k
		}
		keys[i] = k
	}
	return keys, nil
}

// decide charges a call and returns nil to serve it, with the lease to
// release when it ends if the stack holds leases, or the status error to
// fail it with.
func (in *Interceptor) decide(ctx context.Context, method string) (*sluice.Lease, error) {
	var buf [4]string // the keys of a stack of up to 4 rules, without allocating
	keys, err := in.keys(ctx, method, buf[:])
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, "grpclimit: the call carries nothing to rate-limit it by")
	}
	cost := int64(1)
	if in.cost != nil {
		cost = in.cost(ctx, method)
	}
	stack := in.stack
	if in.now != nil {
		stack = stack.At(in.now())
	}
	var (
		v     sluice.Verdict
		lease *sluice.Lease
	)
	if in.leases {
		if lease, err = stack.AcquireN(ctx, keys, cost); err == nil {
			v = lease.Verdict
		}
	} else {
		v, err = stack.AllowN(ctx, keys, cost)
	}
	switch {
	case errors.Is(err, core.ErrInvalidKey):
		// A key is validated once, where the call is decided: a key
		// function's key the store cannot take is no key.
		return nil, status.Error(codes.InvalidArgument, "grpclimit: the call carries nothing to rate-limit it by")
	case err != nil:
		in.report(ctx, method, fmt.Errorf("grpclimit: %w", err))
		return nil, unavailable()
	}
	if v.Allowed {
		return lease, nil
	}
	for i, d := range v.Rules() {
		if !d.Allowed && d.Source == core.SourceFailClosed {
			in.report(ctx, method, fmt.Errorf("rule %q: %w", in.rules[i].name, ErrFailClosed))
			return nil, unavailable()
		}
	}
	return nil, in.denied(v, cost)
}

// report passes a failure to the error handler, if there is one.
func (in *Interceptor) report(ctx context.Context, method string, err error) {
	if in.onError != nil {
		in.onError(ctx, method, err)
	}
}

func unavailable() error {
	return status.Error(codes.Unavailable, "grpclimit: the rate limiter's store is unavailable")
}

// denied returns the status of a call the stack denied with v:
// codes.ResourceExhausted with a RetryInfo (the binding rule's wait
// rounded up to the millisecond, at least 1ms; none when the cost can
// never be admitted) and a QuotaFailure with a violation for every rule
// that denied.
func (in *Interceptor) denied(v sluice.Verdict, cost int64) error {
	qf := &errdetails.QuotaFailure{}
	for i, d := range v.Rules() {
		if d.Allowed {
			continue
		}
		r := &in.rules[i]
		qf.Violations = append(qf.Violations, &errdetails.QuotaFailure_Violation{
			Subject:     "policy:" + r.name,
			Description: r.limit,
			QuotaId:     r.name,
			QuotaValue:  d.Limit,
		})
	}
	var msg strings.Builder
	msg.WriteString("grpclimit: rate limit ")
	msg.WriteString(strconv.Quote(in.rules[v.Binding].name))
	switch {
	case v.Source == core.SourceDenyList:
		msg.WriteString(" does not admit this caller")
	case v.Unsatisfiable():
		fmt.Fprintf(&msg, " admits at most %d at once; this call costs %d and will never be admitted", v.Limit, cost)
	}
	if v.Unsatisfiable() {
		st := status.New(codes.ResourceExhausted, msg.String())
		if s, err := st.WithDetails(qf); err == nil {
			st = s
		}
		return st.Err()
	}
	// A denial's wait is positive; one that says nothing (a decorator's
	// denial) falls back to the wait until the key is full again, and
	// never to "retry now".
	wait := v.RetryAfter
	if wait <= 0 {
		wait = v.ResetAfter
	}
	wait = max(ceilMillis(wait), time.Millisecond)
	fmt.Fprintf(&msg, " exceeded: retry in %v", wait)
	st := status.New(codes.ResourceExhausted, msg.String())
	if s, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)}, qf); err == nil {
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
