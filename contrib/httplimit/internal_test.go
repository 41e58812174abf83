package httplimit

import (
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
)

// TestHeaderNamesCanonical checks that the names the middleware writes
// straight into header maps are the ones http.Header's methods look up.
func TestHeaderNamesCanonical(t *testing.T) {
	for _, name := range []string{hPolicy, hRateLimit, hLimit, hRemaining, hReset, hXLimit, hXRemaining, hXReset, hRetryAfter} {
		if c := http.CanonicalHeaderKey(name); c != name {
			t.Errorf("%q is not canonical: %q", name, c)
		}
	}
}

func TestCeilSeconds(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{0, 0}, {-time.Second, 0}, {1, 1}, {time.Second, 1}, {time.Second + 1, 2},
		{core.RetryNever, int64(core.RetryNever/time.Second) + 1},
	} {
		if got := ceilSeconds(tc.d); got != tc.want {
			t.Errorf("ceilSeconds(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

// TestPolicyItem checks q and w for each kind of limit, including ones
// whose w is not a whole number of seconds or would overflow 64 bits.
func TestPolicyItem(t *testing.T) {
	for _, tc := range []struct {
		alg   core.Algorithm
		limit core.Limit
		want  string
	}{
		{algorithms.TokenBucket, core.PerSecond(10).WithBurst(50), `"p";q=50;w=5`},
		{algorithms.GCRA, core.PerSecond(10), `"p";q=10;w=1`},
		{algorithms.GCRA, core.PerSecond(100).WithBurst(1), `"p";q=1;w=1`}, // 10ms, rounded up
		{algorithms.TokenBucket, core.PerMinute(7).WithBurst(3), `"p";q=3;w=26`},
		{algorithms.FixedWindow, core.PerMinute(100).WithBurst(1), `"p";q=100;w=60`},
		{algorithms.SlidingWindowCounter, core.Per(5, 1500*time.Millisecond), `"p";q=5;w=2`},
		{algorithms.SlidingWindowLog, core.PerDay(1000), `"p";q=1000;w=86400`},
		{algorithms.FixedWindow, core.Per(core.MaxUnits/(1<<20), core.MaxPeriod/(1<<20)), `"p";q=4294967296;w=1074`},
		{algorithms.TokenBucket, core.Per(1<<20, core.MaxPeriod), `"p";q=1048576;w=1125899907`}, // q × period is 2^70
		{algorithms.TokenBucket, core.Per(1, core.MaxPeriod), `"p";q=1;w=1125899907`},
	} {
		lim, err := core.NewLimiter(core.StoreFunc(nil), tc.alg, tc.limit)
		if err != nil {
			t.Fatalf("%v: %v", tc.limit, err)
		}
		if got := policyItem(`"p"`, lim); got != tc.want {
			t.Errorf("%s %v: %s, want %s", tc.alg.Name(), tc.limit, got, tc.want)
		}
	}
}
