package core

import (
	"context"
	"errors"
	"fmt"
)

// MultiStore is implemented by stores that decide several requests as one
// atomic step: every request is charged, or none is. [ApplyAll] uses it
// when a store has it, and otherwise charges in turn and refunds.
type MultiStore interface {
	Store
	// ApplyAll decides reqs together, writing each request's decision to
	// out (as long as reqs). If every request is admitted all are charged;
	// otherwise none is, and out holds what each would have got. It
	// rejects what [ValidateAll] rejects, before touching any state.
	ApplyAll(ctx context.Context, reqs []Request, out []Decision) error
}

// ApplyAll decides reqs as one: if every request would be admitted, all
// are charged; if any is denied, none is charged, and out holds each
// request's decision as if it alone had been asked. out must be as long as
// reqs. The requests must be plain charges (no Peek, Refund or MaxWait)
// naming distinct key and algorithm pairs.
//
// On a [MultiStore] that is one atomic step. On any other store ApplyAll
// charges the requests in order and, at the first denial, refunds the
// charges made (see [Request.Refund]) and peeks at the requests not yet
// asked, so that out is complete. Until the refunds land, other callers
// see those charges: a request may be denied that a moment later would
// pass. Each refund is made at once, in the same call, so the window is a
// few store round trips. A store failure part way also refunds what was
// charged, as far as the store lets it.
func ApplyAll(ctx context.Context, s Store, reqs []Request, out []Decision) error {
	if m, ok := s.(MultiStore); ok {
		return m.ApplyAll(ctx, reqs, out) // which validates
	}
	if err := ValidateAll(reqs, out); err != nil {
		return err
	}
	return ApplyInTurn(ctx, s, reqs, out)
}

// ValidateAll checks requests to be decided together ([ApplyAll],
// [MultiStore]): each must be valid and a plain charge, no two may name
// the same key and algorithm, and out must be as long as reqs.
func ValidateAll(reqs []Request, out []Decision) error {
	if len(out) != len(reqs) {
		return fmt.Errorf("%w: %d decisions for %d requests", ErrInvalidRequest, len(out), len(reqs))
	}
	for i := range reqs {
		r := &reqs[i]
		if err := r.Validate(); err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
		if r.Peek || r.Refund || r.MaxWait > 0 {
			return fmt.Errorf("%w: request %d: only charges are decided together", ErrInvalidRequest, i)
		}
		for j := range i {
			if reqs[j].Key == r.Key && reqs[j].Algorithm.Name() == r.Algorithm.Name() {
				return fmt.Errorf("%w: requests %d and %d name the same key and algorithm", ErrInvalidRequest, j, i)
			}
		}
	}
	return nil
}

// ApplyInTurn is [ApplyAll] for a store that cannot decide the requests as
// one step: it charges them in order and, at the first denial, refunds the
// charges made and peeks at the requests not yet asked; a failure part way
// also refunds what was charged. A [MultiStore] that cannot decide some
// requests at once (keys in different Redis Cluster slots) falls back to
// it. The requests must have passed [ValidateAll].
func ApplyInTurn(ctx context.Context, s Store, reqs []Request, out []Decision) error {
	refund := func(n int) error {
		var errs []error
		for j := n - 1; j >= 0; j-- {
			r := reqs[j]
			r.Refund = true
			if _, err := s.Apply(context.WithoutCancel(ctx), r); err != nil {
				errs = append(errs, fmt.Errorf("refund of request %d: %w", j, err))
			}
		}
		return errors.Join(errs...)
	}
	for i := range reqs {
		d, err := s.Apply(ctx, reqs[i])
		if err != nil {
			return errors.Join(err, refund(i))
		}
		out[i] = d
		if d.Allowed {
			continue
		}
		if err := refund(i); err != nil {
			return err
		}
		for j := i + 1; j < len(reqs); j++ {
			r := reqs[j]
			r.Peek = true
			if out[j], err = s.Apply(ctx, r); err != nil {
				return err
			}
		}
		return nil
	}
	return nil
}

// Rule is one limit of a [Stack]: a name, which headers and telemetry
// show and which keeps the rule's state apart from every other rule's, an
// algorithm and a limit.
type Rule struct {
	// Name identifies the rule: 1 to 64 bytes of letters, digits, '-',
	// '_' and '.', unique within its stack. It is part of where the rule's
	// state is stored, so renaming a rule starts it afresh.
	Name      string
	Algorithm Algorithm
	Limit     Limit
}

// Stack applies several rules to one request, all or nothing: a request
// passes only if every rule admits it, and a request any rule denies
// charges none of them. Typical stacks limit a user, their tenant and the
// whole service at once, or pair a burst limit with a daily quota on one
// key.
//
// Make one with [NewStack]. A Stack is safe for concurrent use and keeps
// no state of its own.
type Stack struct {
	store Store
	rules []Rule
	algs  []Algorithm // each rule's algorithm, named after the rule
}

// NewStack returns a stack of rules over store. It fails with
// [ErrNoStore], or with an error wrapping [ErrInvalidRequest],
// [ErrNoAlgorithm] or [ErrInvalidLimit] naming the rule at fault.
func NewStack(store Store, rules ...Rule) (*Stack, error) {
	if store == nil {
		return nil, ErrNoStore
	}
	if len(rules) == 0 {
		return nil, fmt.Errorf("%w: a stack needs at least one rule", ErrInvalidRequest)
	}
	s := &Stack{store: store, rules: append([]Rule(nil), rules...)}
	for i, r := range s.rules {
		if err := validRuleName(r.Name); err != nil {
			return nil, fmt.Errorf("rule %d: %w", i, err)
		}
		for _, prev := range s.rules[:i] {
			if prev.Name == r.Name {
				return nil, fmt.Errorf("%w: two rules are named %q", ErrInvalidRequest, r.Name)
			}
		}
		if r.Algorithm == nil {
			return nil, fmt.Errorf("rule %q: %w", r.Name, ErrNoAlgorithm)
		}
		if err := r.Limit.Validate(); err != nil {
			return nil, fmt.Errorf("rule %q: %w", r.Name, err)
		}
		if !r.Limit.inf {
			if err := r.Algorithm.Validate(r.Limit); err != nil {
				return nil, fmt.Errorf("rule %q: %w", r.Name, err)
			}
		}
		s.algs = append(s.algs, Named(r.Algorithm, r.Name))
	}
	return s, nil
}

func validRuleName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("%w: rule name %q must be 1 to 64 bytes", ErrInvalidRequest, name)
	}
	for _, c := range []byte(name) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.':
		default:
			return fmt.Errorf("%w: rule name %q may hold only letters, digits, '-', '_' and '.'", ErrInvalidRequest, name)
		}
	}
	return nil
}

// Rules returns the stack's rules, in order.
func (s *Stack) Rules() []Rule { return append([]Rule(nil), s.rules...) }

// Verdict is a [Stack]'s answer: the binding rule's decision, and each
// rule's own.
type Verdict struct {
	// Decision is the binding rule's decision, with Allowed true only if
	// every rule admitted the request. The binding rule is, after a
	// denial, the denying rule with the longest wait; after an admission,
	// the rule closest to exhaustion (the least Remaining for its Limit).
	Decision
	// Binding is the index of the binding rule.
	Binding int
	// Rules holds each rule's decision, in the stack's order. After a
	// denial, the rules that admitted report what they would have left.
	Rules []Decision
}

// Allow is shorthand for AllowN(ctx, keys, 1).
func (s *Stack) Allow(ctx context.Context, keys ...string) (Verdict, error) {
	return s.AllowN(ctx, keys, 1)
}

// AllowN charges cost n to every rule, rule i on keys[i], if every rule
// admits it; otherwise it charges none (see [ApplyAll] for how, on each
// kind of store). keys must hold one key per rule; a rule that limits
// everyone together takes a constant key.
func (s *Stack) AllowN(ctx context.Context, keys []string, n int64) (Verdict, error) {
	if len(keys) != len(s.rules) {
		return Verdict{}, fmt.Errorf("%w: %d keys for %d rules", ErrInvalidRequest, len(keys), len(s.rules))
	}
	reqs := make([]Request, len(s.rules))
	for i, r := range s.rules {
		reqs[i] = Request{Key: keys[i], Algorithm: s.algs[i], Limit: r.Limit, Cost: n}
	}
	v := Verdict{Rules: make([]Decision, len(reqs))}
	if err := ApplyAll(ctx, s.store, reqs, v.Rules); err != nil {
		return Verdict{}, err
	}
	v.Binding = Binding(v.Rules)
	v.Decision = v.Rules[v.Binding]
	for _, d := range v.Rules {
		v.Allowed = v.Allowed && d.Allowed
	}
	return v, nil
}

// Binding returns the index of the decision that binds a set of
// decisions made together: among denials, the one with the longest wait;
// if all were admitted, the one closest to exhaustion (least Remaining in
// proportion to its Limit). It returns 0 for an empty set.
func Binding(ds []Decision) int {
	best := 0
	for i := 1; i < len(ds); i++ {
		a, b := ds[i], ds[best]
		switch {
		case !a.Allowed && b.Allowed:
			best = i
		case !a.Allowed && !b.Allowed:
			if a.RetryAfter > b.RetryAfter {
				best = i
			}
		case a.Allowed && b.Allowed:
			if fraction(a) < fraction(b) {
				best = i
			}
		}
	}
	return best
}

// fraction is how much of its limit a decision has left, 0 to 1.
func fraction(d Decision) float64 {
	if d.Limit <= 0 {
		return 1
	}
	return float64(d.Remaining) / float64(d.Limit)
}

// Named returns alg under another name, alg's own followed by "/" and
// name, so that a rule's state is kept apart from every other state of
// the same key (two token buckets on one key: a burst and a daily quota).
// It decides exactly as alg, and keeps alg's abilities: its Lua twin
// ([Scripted]), whether it reserves ([Reserver]) and whether it holds
// leases ([Leaser]).
func Named(alg Algorithm, name string) Algorithm {
	return named{Algorithm: alg, name: alg.Name() + "/" + name}
}

type named struct {
	Algorithm
	name string
}

func (n named) Name() string { return n.name }

// Script returns the twin of the named algorithm, or nil if it has none.
func (n named) Script() *Script {
	if s, ok := n.Algorithm.(Scripted); ok {
		return s.Script()
	}
	return nil
}

// Leases reports whether the named algorithm holds leases.
func (n named) Leases() bool {
	l, ok := n.Algorithm.(Leaser)
	return ok && l.Leases()
}

// Reserves reports whether the named algorithm reserves.
func (n named) Reserves() bool {
	r, ok := n.Algorithm.(Reserver)
	return ok && r.Reserves()
}
