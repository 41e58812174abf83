package sluice

import (
	"context"
	"unsafe"

	"github.com/sluicehq/sluice/core"
)

// Verdict is the answer to several requests decided together: the
// binding rule's decision, and each rule's own. A [Stack] answers with
// one; a [Reservation] and a [Lease] carry one.
type Verdict struct {
	// Decision is the binding rule's decision, with Allowed true only if
	// every rule admitted the request, and, for an admitted reservation,
	// a Delay of the longest any rule needs.
	Decision
	// Binding is the index of the binding rule (see [core.Binding]).
	Binding int
	rules   []Decision // each rule's decision, if there are several
	alone   bool       // one rule, whose decision is Decision
}

// Rules returns each rule's decision, in order. After a denial, the rules
// that admitted report what they would have left. A zero Verdict has
// none. The slice is valid only until v is next assigned: for a verdict
// on one rule it is v's Decision itself, so that deciding one rule
// allocates nothing.
func (v *Verdict) Rules() []Decision {
	if v.alone {
		return unsafe.Slice(&v.Decision, 1)
	}
	return v.rules
}

// verdict sums up rules' decisions.
func verdict(rules []Decision) Verdict {
	v := Verdict{Binding: core.Binding(rules), rules: rules}
	v.Decision = rules[v.Binding]
	v.Allowed = true
	for _, d := range rules {
		v.Allowed = v.Allowed && d.Allowed
	}
	if v.Allowed {
		for _, d := range rules {
			v.Delay = max(v.Delay, d.Delay)
		}
	}
	return v
}

// apply decides reqs on store: one request with Apply, several with
// ApplyAll.
func apply(ctx context.Context, store Store, reqs []core.Request) (Verdict, error) {
	if len(reqs) == 1 {
		return applyOne(ctx, store, reqs[0])
	}
	out := make([]Decision, len(reqs))
	if err := store.ApplyAll(ctx, reqs, out); err != nil {
		return Verdict{}, err
	}
	return verdict(out), nil
}

// applyOne decides one request with Apply: the verdict is its decision.
// The decision is received where applyOne returns it, as in
// [Limiter.AllowN]: copied from a variable, the copy waited for the
// stores Apply had just made to it, and a stack of one rule took about
// 142 ns a decision on memstore instead of 124.
func applyOne(ctx context.Context, store Store, req core.Request) (v Verdict, err error) {
	v.Decision, err = store.Apply(ctx, req)
	if err != nil {
		return Verdict{}, err
	}
	v.alone = true
	return v, nil
}
