package loadgen

import (
	"math"
	"math/bits"
	"time"
)

// The histogram is log-linear: values below 64 ns have a bucket each, and
// every power of two above is split into 32 equal buckets, so a bucket is
// at most 1/32 (about 3%) of its values wide. 1,920 buckets cover every
// uint64 of nanoseconds; recording is a few integer operations and one
// increment, with no allocation, so each worker keeps a histogram of its
// own and they are added up once the run is over.
const (
	subBits  = 5
	subCount = 1 << subBits
	nBuckets = (64 - subBits - 1 + 2) * subCount // 1920
)

// histogram counts latencies in nanoseconds. Its zero value is empty. It
// is not safe for concurrent use.
type histogram struct {
	counts [nBuckets]uint64
	total  uint64
	max    uint64
}

// bucketOf returns the index of v's bucket.
func bucketOf(v uint64) int {
	if v < 2*subCount {
		return int(v)
	}
	// Keep v's six leading bits: m is in [32, 64), and each shift (a
	// power of two) owns the 32 indices from (shift+1)*32.
	shift := bits.Len64(v) - subBits - 1
	return shift<<subBits + int(v>>shift)
}

// bucketBounds returns the lowest and highest value of bucket i.
func bucketBounds(i int) (lo, hi uint64) {
	if i < 2*subCount {
		return uint64(i), uint64(i)
	}
	shift := i>>subBits - 1
	m := uint64(i - shift<<subBits)
	return m << shift, (m+1)<<shift - 1
}

func (h *histogram) record(d time.Duration) {
	v := uint64(max(d, 0))
	h.counts[bucketOf(v)]++
	h.total++
	h.max = max(h.max, v)
}

func (h *histogram) add(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
	h.max = max(h.max, o.max)
}

// quantile returns the value below which a fraction q of the recorded
// values lie: the middle of the bucket that holds the value of rank
// ceil(q*total), within 1.6% of the true value. It returns 0 for an
// empty histogram; q is clamped to [0, 1], and 1 returns the exact maximum.
func (h *histogram) quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	if q >= 1 {
		return time.Duration(h.max)
	}
	rank := uint64(math.Ceil(max(q, 0) * float64(h.total)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, hi := bucketBounds(i)
			return time.Duration(min(lo+(hi-lo)/2, h.max))
		}
	}
	return time.Duration(h.max)
}
