package limits

import (
	"github.com/sluicehq/sluice/core"
)

// Allotted returns alg with an allotment of up to n requests: it decides
// exactly as alg, under alg's name (so a rule's state is the same allotted
// or not), and [AllotmentOf] reads n back. A store that takes allotments
// (stores/layered, with AllotmentOf as its Config.Allot) takes them for it.
func Allotted(alg core.Algorithm, n int64) core.Algorithm {
	return allotted{Algorithm: alg, most: n}
}

// allotted is an algorithm with the size of its rule's allotment.
type allotted struct {
	core.Algorithm
	most int64
}

// Unwrap returns the algorithm allotted.
func (a allotted) Unwrap() core.Algorithm { return a.Algorithm }

// AllotmentOf returns the largest allotment a request under alg takes: the
// one [Allotted] gave, or 0. It is the Config.Allot of stores/layered for
// a server's requests: AllotmentOf(req.Algorithm).
func AllotmentOf(alg core.Algorithm) int64 {
	if a, ok := core.AlgorithmAs[allotted](alg); ok {
		return a.most
	}
	return 0
}

// allotter is an algorithm whose capacity may be allotted: stores/layered's
// Allotter, as far as the configuration needs it.
type allotter interface {
	core.Algorithm
	MaxAllotment(core.Limit) int64
}

// allottable reports whether a rule under alg can take allotments: the
// fixed window, the token bucket and GCRA can.
func allottable(alg core.Algorithm) bool {
	_, ok := core.AlgorithmAs[allotter](alg)
	return ok
}

// maxAllotment is the largest allotment r may take: its capacity.
func maxAllotment(r *Rule) int64 {
	if a, ok := core.AlgorithmAs[allotter](r.Algorithm); ok {
		return a.MaxAllotment(r.Limit)
	}
	return 0
}
