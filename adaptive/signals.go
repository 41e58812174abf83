package adaptive

import (
	"math"
	"math/bits"
	"strconv"
	"sync/atomic"
	"time"
)

// Outcome is what became of one downstream call, as [Controller.Report]
// receives it.
type Outcome uint8

const (
	// OK is a call that succeeded: its latency is the laws' signal.
	OK Outcome = iota
	// Failed is a call that failed or timed out. Failures count towards
	// the [ErrorRatio]; their latency is not used, since a fast error
	// would make an ailing downstream look quick.
	Failed
	// Overloaded is a call the downstream refused for overload: an HTTP
	// 503 or 429 from it, a gRPC RESOURCE_EXHAUSTED. One such answer in
	// an interval makes both laws back off.
	Overloaded
)

// String returns "ok", "failed" or "overloaded".
func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Failed:
		return "failed"
	case Overloaded:
		return "overloaded"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// The latency histogram: latencies below exact ns have a bucket each;
// above, each power of two is split into subCount buckets, so a bucket's
// width is at most 1/16 of its lower bound and its midpoint is within
// about 3 % of any latency in it. 960 buckets cover every positive
// time.Duration, and reading them all once an interval costs nothing that
// matters.
const (
	subBits    = 4
	subCount   = 1 << subBits
	exact      = 2 * subCount
	numBuckets = (63-subBits-1)*subCount + exact
)

// bucketOf returns the bucket of a latency of ns nanoseconds.
func bucketOf(ns uint64) int {
	if ns < exact {
		return int(ns)
	}
	shift := bits.Len64(ns) - (subBits + 1)
	return shift*subCount + int(ns>>shift)
}

// bucketValue returns the midpoint of bucket i, in ns.
func bucketValue(i int) float64 {
	if i < exact {
		return float64(i)
	}
	shift := i/subCount - 1
	lo := uint64(i%subCount+subCount) << shift
	return float64(lo) + float64(uint64(1)<<shift)/2
}

// counters aggregate reported samples since the controller was made. They
// only grow: an interval's signals are the difference between two
// readings, so a report racing with the reading is counted in one interval
// or the next, never lost, and reporting takes no lock. Each count is a
// uint64, whose differences are right even after it wraps.
type counters struct {
	failed, overloaded, invalid atomic.Uint64
	sum                         atomic.Uint64 // ns, of OK calls
	failedSum                   atomic.Uint64 // ns, of failed calls
	hist                        [numBuckets]atomic.Uint64
}

// signals are one interval's samples: what a law reads.
type signals struct {
	ok, failed, overloaded, invalid uint64
	sum                             uint64 // ns, of the OK calls
	failedSum                       uint64 // ns, of the failed calls
	hist                            [numBuckets]uint64
}

// read copies the counters into s.
func (c *counters) read(s *signals) {
	s.failed, s.overloaded, s.invalid = c.failed.Load(), c.overloaded.Load(), c.invalid.Load()
	s.sum, s.failedSum = c.sum.Load(), c.failedSum.Load()
	for i := range s.hist {
		s.hist[i] = c.hist[i].Load()
	}
}

// since makes s the difference between the readings cur and prev, and
// counts its OK calls.
func (s *signals) since(cur, prev *signals) {
	s.failed, s.overloaded, s.invalid = cur.failed-prev.failed, cur.overloaded-prev.overloaded, cur.invalid-prev.invalid
	s.sum, s.failedSum = cur.sum-prev.sum, cur.failedSum-prev.failedSum
	s.ok = 0
	for i := range s.hist {
		s.hist[i] = cur.hist[i] - prev.hist[i]
		s.ok += s.hist[i]
	}
}

// quantile returns the q-quantile of the interval's OK latencies: the
// midpoint of the bucket holding the ⌈q·n⌉-th smallest. Zero if there are
// none.
func (s *signals) quantile(q float64) time.Duration {
	if s.ok == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(s.ok)))
	rank = min(max(rank, 1), s.ok)
	var seen uint64
	for i, n := range s.hist {
		if seen += n; seen >= rank {
			return time.Duration(bucketValue(i))
		}
	}
	return 0 // not reached: the buckets hold s.ok samples
}

// slowest returns how long the interval's calls took, at most: the
// largest OK latency (the upper end of its bucket) or the failed calls'
// mean latency, whichever is longer.
func (s *signals) slowest() time.Duration {
	var d float64
	if s.failed > 0 {
		d = float64(s.failedSum) / float64(s.failed)
	}
	for i := len(s.hist) - 1; i >= 0; i-- {
		if s.hist[i] > 0 {
			d = max(d, bucketValue(i)*(1+1.0/subCount))
			break
		}
	}
	return time.Duration(d)
}
