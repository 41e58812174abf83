package httplimit

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores"
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
		{algorithms.Concurrency, core.Per(4, time.Minute), `"p";q=4;w=60`}, // 4 slots, each held at most a minute
	} {
		if err := tc.limit.Validate(); err != nil {
			t.Fatalf("%v: %v", tc.limit, err)
		}
		if got := policyItem(`"p"`, tc.alg, tc.limit); got != tc.want {
			t.Errorf("%s %v: %s, want %s", tc.alg.Name(), tc.limit, got, tc.want)
		}
	}
}

// TestRuleNamesAreStructuredFieldStrings checks every byte core accepts in
// a rule name against RFC 9651's sf-string: each is printable ASCII other
// than '"' and '\', so the quoted name is the name between quotes, and
// the headers need no escaping. It fails if sluice.NewStack ever accepts a
// byte a header cannot carry as it is.
func TestRuleNamesAreStructuredFieldStrings(t *testing.T) {
	store := stores.Func(func(context.Context, core.Request) (core.Decision, error) { return core.Decision{}, nil })
	accepted := 0
	for c := range 256 {
		name := "a" + string(rune(c))
		if c >= 0x80 {
			name = "a" + string([]byte{byte(c)})
		}
		if _, err := sluice.NewStack(store, sluice.Rule{Name: name, Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(1)}); err != nil {
			continue
		}
		accepted++
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			t.Errorf("core accepts byte %#x in a rule name: not an sf-string character", c)
		}
		if q := strconv.Quote(name); q != `"`+name+`"` {
			t.Errorf("rule name %q is quoted as %s", name, q)
		}
		if err := validName(name); err != nil {
			t.Errorf("validName(%q): %v", name, err)
		}
	}
	if accepted < 60 { // letters, digits, '-', '_', '.'
		t.Errorf("core accepts only %d bytes in a rule name", accepted)
	}
}
