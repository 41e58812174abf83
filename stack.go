package sluice

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core"
)

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
	store  Store
	rules  []Rule
	terms  []core.Terms // each rule's: its algorithm named after it, its limit, the instant of At
	leases bool         // a rule holds concurrency leases
	queue  int64        // each rule's queue bound for reservations; 0: none (WithQueue)
	fixed  bool         // the terms' Now is the instant to decide at (At)
	held   *sync.Pool   // of *[]core.Request, apply's requests; the stack's copies (At) share it
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
	s := &Stack{store: store, rules: append([]Rule(nil), rules...), held: new(sync.Pool)}
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
		if !r.Limit.IsInf() {
			if err := r.Algorithm.Validate(r.Limit); err != nil {
				return nil, fmt.Errorf("rule %q: %w", r.Name, err)
			}
		}
		s.terms = append(s.terms, core.Terms{Algorithm: core.Named(r.Algorithm, r.Name), Limit: r.Limit})
		s.leases = s.leases || core.Leases(r.Algorithm)
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

// At returns a stack like s that decides every call at instant t instead
// of on its store's clock, as [Limiter.At] does for one limit: t is
// rounded down to its microsecond, each decision's At reports the
// instant used, every call fails with an error wrapping [ErrInvalidTime]
// when t is before 1970, after 2112 or the zero Time, and Wait and WaitN
// fail with [ErrInvalidRequest]. s is unchanged; At allocates the copy.
func (s *Stack) At(t time.Time) *Stack {
	f := *s
	f.terms = append([]core.Terms(nil), s.terms...)
	for i := range f.terms {
		f.terms[i].Now = t
	}
	f.fixed = true
	return &f
}

// Rules returns the stack's rules, in order.
func (s *Stack) Rules() []Rule { return append([]Rule(nil), s.rules...) }

// Store returns the stack's store.
func (s *Stack) Store() Store { return s.store }

// Allow is shorthand for AllowN(ctx, keys, 1).
func (s *Stack) Allow(ctx context.Context, keys ...string) (Verdict, error) {
	return s.AllowN(ctx, keys, 1)
}

// AllowN charges cost n to every rule, rule i on keys[i], if every rule
// admits it; otherwise it charges none. keys must hold one key per rule; a
// rule that limits everyone together takes a constant key. On every
// sluice store this is one atomic store call (see docs/architecture.md
// for the one exception, rules in different slots of a Redis Cluster). A
// stack with a concurrency rule fails with [ErrUnsupported]: its slots
// are taken with [Stack.AcquireN], which returns the lease that gives them
// back.
func (s *Stack) AllowN(ctx context.Context, keys []string, n int64) (v Verdict, err error) {
	if s.leases {
		return Verdict{}, fmt.Errorf("%w: the stack has a concurrency rule: use Acquire, and Release the lease", ErrUnsupported)
	}
	if len(s.rules) == 1 {
		// One rule: no batch, and no slice of requests to allocate.
		if err := s.checkKeys(keys); err != nil {
			return Verdict{}, err
		}
		if s.fixed && s.terms[0].Now.IsZero() {
			return Verdict{}, errZeroInstant
		}
		req := core.Request{Key: keys[0], Cost: n, Terms: &s.terms[0]}
		if v, err = applyOne(ctx, s.store, req); err != nil {
			return v, s.rule([]core.Request{req}, err)
		}
		return v, nil
	}
	return s.apply(ctx, keys, n, core.OpCharge)
}

// AllowAtMost charges every rule, rule i on keys[i], as much of cost n as
// every rule admits now, at least 1 and at most n, and reports how much in
// the verdict's Admitted (each rule's decision has the same): the largest
// cost all the rules admit, found and charged in one atomic store call,
// as AllowN is. If any rule admits nothing, none is charged and the
// verdict is a denial (Admitted 0) whose RetryAfter says when one will
// pass. It fails with an error wrapping [ErrInvalidCost] when n is below
// 1, and, like AllowN, with [ErrUnsupported] for a stack with a
// concurrency rule. A store that decides some batches in turn
// (stores.ApplyInTurn, such as a Redis Cluster store for keys in several
// slots) finds the cost, then charges it in turn: a charge by another
// caller in between may deny what would have fit, but never admits more
// than a rule admits.
func (s *Stack) AllowAtMost(ctx context.Context, keys []string, n int64) (Verdict, error) {
	if s.leases {
		return Verdict{}, fmt.Errorf("%w: the stack has a concurrency rule: its slots are not admitted in part", ErrUnsupported)
	}
	return s.apply(ctx, keys, n, core.OpAtMost)
}

// Peek reports the verdict Allow would return now, without charging any
// rule or changing any state.
func (s *Stack) Peek(ctx context.Context, keys ...string) (Verdict, error) {
	return s.apply(ctx, keys, 1, core.OpPeek)
}

// Level reports every rule's level now, rule i's for keys[i], without
// charging any rule or changing any state: the verdict of requests of cost
// 0, whose Rules hold each rule's level (see [Limiter.Level]) and whose
// binding rule is the one with the least left in proportion to its
// capacity. It is one store call.
func (s *Stack) Level(ctx context.Context, keys ...string) (Verdict, error) {
	return s.apply(ctx, keys, 0, core.OpPeek)
}

// Reset forgets every rule's state for its key, rule i's for keys[i].
// It resets every rule even when one fails, and returns the failures
// joined.
func (s *Stack) Reset(ctx context.Context, keys ...string) error {
	if err := s.checkKeys(keys); err != nil {
		return err
	}
	var errs []error
	for i := range s.terms {
		if err := s.store.Reset(ctx, keys[i], s.terms[i].Algorithm); err != nil {
			errs = append(errs, fmt.Errorf("rule %q: %w", s.rules[i].Name, err))
		}
	}
	return errors.Join(errs...)
}

// ReserveN charges cost n to every rule now if every rule admits it within
// maxWait, letting keys go into debt, and returns the reservation, whose
// Delay is the longest any rule needs; if any rule would need longer, none
// is charged (OK is false). It is one atomic store call, as AllowN is.
// Every rule's algorithm must reserve ([core.Reserver]); otherwise ReserveN
// fails with [ErrUnsupported] naming the rule.
func (s *Stack) ReserveN(ctx context.Context, keys []string, n int64, maxWait time.Duration) (*Reservation, error) {
	reqs, err := s.requests(nil, keys, n, core.OpReserve)
	if err != nil {
		return nil, err
	}
	for i := range reqs {
		reqs[i] = reqs[i].Clone()
		reqs[i].MaxWait, reqs[i].MaxQueue = maxWait, s.queue
	}
	r, err := reserve(ctx, s.store, reqs)
	return r, s.rule(reqs, err)
}

// WithQueue returns a stack like s whose reservations (ReserveN, Wait,
// WaitN) queue at most n units of cost on each rule's key: a reservation
// is admitted only if, after it, every rule's key owes at most n tokens
// (see [Limiter.WithQueue] and [core.Terms.MaxQueue]). It fails with an
// error wrapping [ErrInvalidRequest] if n is not 1 to [core.MaxUnits], and
// with [ErrUnsupported] naming a rule whose algorithm cannot reserve.
func (s *Stack) WithQueue(n int64) (*Stack, error) {
	if err := checkQueue(n); err != nil {
		return nil, err
	}
	for _, r := range s.rules {
		if !r.Limit.IsInf() && !core.Reserves(r.Algorithm) {
			return nil, fmt.Errorf("rule %q: %w: algorithm %q cannot reserve, so it cannot queue", r.Name, ErrUnsupported, r.Algorithm.Name())
		}
	}
	q := *s
	q.queue = n
	return &q, nil
}

// Queue returns the stack's queue bound ([Stack.WithQueue]); 0 if it has
// none.
func (s *Stack) Queue() int64 { return s.queue }

// Wait is shorthand for WaitN(ctx, keys, 1).
func (s *Stack) Wait(ctx context.Context, keys ...string) (Verdict, error) {
	return s.WaitN(ctx, keys, 1)
}

// WaitN blocks until cost n may be spent under every rule, then returns
// the verdict. It makes one store call, a reservation of every rule (see
// [Stack.ReserveN]) for as long as ctx allows, then sleeps the longest
// delay; it fails as [Limiter.WaitN] does (with [ErrQueueFull] when a
// rule's queue is full, see [Stack.WithQueue]), and gives every rule its
// capacity back, within [CleanupTimeout], when ctx ends while it sleeps.
// A stack fixed at an instant ([Stack.At]) cannot wait: WaitN fails with
// [ErrInvalidRequest].
func (s *Stack) WaitN(ctx context.Context, keys []string, n int64) (Verdict, error) {
	if s.fixed {
		return Verdict{}, errWaitAt
	}
	return wait(ctx, n, s.queue > 0, func(maxWait time.Duration) (*Reservation, error) {
		return s.ReserveN(ctx, keys, n, maxWait)
	})
}

// AcquireN charges cost n to every rule, all or nothing, acquiring n
// slots of each concurrency rule under a new lease; the returned lease's
// Release gives the slots back (the other rules' charges stay, as the
// request was made). A stack without a concurrency rule acquires nothing
// to release, and AcquireN is AllowN with a lease whose Release does
// nothing.
func (s *Stack) AcquireN(ctx context.Context, keys []string, n int64) (*Lease, error) {
	reqs, err := s.requests(nil, keys, n, core.OpCharge)
	if err != nil {
		return nil, err
	}
	l, err := acquire(ctx, s.store, reqs)
	return l, s.rule(reqs, err)
}

// Acquire is shorthand for AcquireN(ctx, keys, 1).
func (s *Stack) Acquire(ctx context.Context, keys ...string) (*Lease, error) {
	return s.AcquireN(ctx, keys, 1)
}

// checkKeys reports a key count other than the rules'. The keys
// themselves are the store's to validate (see [Stack.rule]).
func (s *Stack) checkKeys(keys []string) error {
	if len(keys) != len(s.rules) {
		return fmt.Errorf("%w: %d keys for %d rules", ErrInvalidRequest, len(keys), len(s.rules))
	}
	return nil
}

// rule names, in the store's error err, the rule whose request is
// invalid. A request is validated once, by the store that decides it or
// the decorator that answers it, which names a batch's requests by index
// only; the stack looks for the rule at fault only after a call failed.
func (s *Stack) rule(reqs []core.Request, err error) error {
	if err != nil {
		for i := range reqs {
			if reqs[i].Validate() != nil {
				return fmt.Errorf("rule %q: %w", s.rules[i].Name, err)
			}
		}
	}
	return err
}

// apply decides the stack's requests for keys, cost n and op in one
// store call. The requests are made in a slice the stack reuses once the
// store has returned, which keeps neither slice it is given (see
// core.Store's ApplyAll): a decision on several rules allocates only its
// Verdict's Rules, and one on a single rule nothing.
func (s *Stack) apply(ctx context.Context, keys []string, n int64, op core.Op) (Verdict, error) {
	held, _ := s.held.Get().(*[]core.Request)
	if held == nil {
		held = new([]core.Request)
	}
	defer s.held.Put(held)
	reqs, err := s.requests(*held, keys, n, op)
	if err != nil {
		return Verdict{}, err
	}
	*held = reqs
	v, err := apply(ctx, s.store, reqs)
	err = s.rule(reqs, err)
	clear(reqs) // their keys are the caller's
	return v, err
}

// requests returns the stack's requests for keys, cost n and op, as the
// store will validate them, in dst if it has room.
func (s *Stack) requests(dst []core.Request, keys []string, n int64, op core.Op) ([]core.Request, error) {
	if err := s.checkKeys(keys); err != nil {
		return nil, err
	}
	if s.fixed && s.terms[0].Now.IsZero() {
		return nil, errZeroInstant
	}
	reqs := dst[:0]
	if cap(reqs) < len(s.rules) {
		reqs = make([]core.Request, 0, len(s.rules))
	}
	for i, r := range s.rules {
		req := core.Request{Key: keys[i], Cost: n, Op: op, Terms: &s.terms[i]}
		if core.Leases(r.Algorithm) && op == core.OpCharge {
			req.Lease = rand.Int64N(core.MaxUnits) + 1
		}
		reqs = append(reqs, req)
	}
	return reqs, nil
}
