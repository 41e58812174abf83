package limits

import (
	"github.com/sluicehq/sluice/core"
)

// Leased returns alg with a lease of batches of up to batch requests: it
// decides exactly as alg, under alg's name (so a rule's state is the same
// leased or not), and [LeaseOf] reads the batch back. A store that leases
// (stores/layered, with LeaseOf as its Config.Lease) takes batches for it.
func Leased(alg core.Algorithm, batch int64) core.Algorithm {
	return leased{Algorithm: alg, batch: batch}
}

// leased is an algorithm with a lease's batch.
type leased struct {
	core.Algorithm
	batch int64
}

// Unwrap returns the algorithm leased.
func (l leased) Unwrap() core.Algorithm { return l.Algorithm }

// LeaseOf returns the batch a request under alg leases: the one [Leased]
// gave, or 0. It is the Config.Lease of stores/layered for a server's
// requests: LeaseOf(req.Algorithm).
func LeaseOf(alg core.Algorithm) int64 {
	if l, ok := core.AlgorithmAs[leased](alg); ok {
		return l.batch
	}
	return 0
}

// batcher is an algorithm that may be taken in batches: stores/layered's
// Batcher, as far as the configuration needs it.
type batcher interface {
	core.Algorithm
	MaxBatch(core.Limit) int64
}

// leasable reports whether a rule under alg can lease: the fixed window,
// the token bucket and GCRA can.
func leasable(alg core.Algorithm) bool {
	_, ok := core.AlgorithmAs[batcher](alg)
	return ok
}

// maxLease is the largest batch r may lease: its capacity.
func maxLease(r *Rule) int64 {
	if b, ok := core.AlgorithmAs[batcher](r.Algorithm); ok {
		return b.MaxBatch(r.Limit)
	}
	return 0
}
