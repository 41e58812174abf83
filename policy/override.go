package policy

import (
	"hash/maphash"
	"sync/atomic"

	"github.com/sluicehq/sluice/core"
)

// overrideSlots is how many terms an override's cache holds: one for each
// pair of terms and limit it has seen, enough for the tiers of several
// limiters.
const overrideSlots = 64

// overrides keeps the terms [WithOverride] built, a request's terms under
// another limit, so that deciding under a limit the override gave before
// allocates nothing. Each slot holds the terms last built for a pair that
// hashes to it; a miss builds them anew, and the cache never grows.
type overrides struct {
	seed  maphash.Seed
	slots [overrideSlots]atomic.Pointer[overridden]
}

// overrideKey is the pair of terms and limit an override's terms are
// built from. Holding the terms keeps them, and so the key, unique.
type overrideKey struct {
	base  *core.Terms
	limit core.Limit
}

// overridden is base's terms under limit, for key.
type overridden struct {
	key   overrideKey
	terms core.Terms
}

// under returns terms like base's under limit.
func (o *overrides) under(base *core.Terms, limit core.Limit) *core.Terms {
	k := overrideKey{base, limit}
	slot := &o.slots[maphash.Comparable(o.seed, k)%overrideSlots]
	if e := slot.Load(); e != nil && e.key == k {
		return &e.terms
	}
	e := &overridden{key: k, terms: *base}
	e.terms.Limit = limit
	slot.Store(e)
	return &e.terms
}
