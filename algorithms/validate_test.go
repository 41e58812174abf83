package algorithms_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
)

// TestAlgorithmValidate: the sliding window counter rejects Rate × Period
// (µs) above 2^52, the log rates above MaxLogRate; the others take every
// limit core accepts. Requests reach the same checks through
// Request.Validate.
func TestAlgorithmValidate(t *testing.T) {
	t.Parallel()
	// 2^52 / 86,400,000,000µs = 52,124.99…: the largest daily rate the
	// counter can weigh exactly.
	counterMax := core.PerDay(core.MaxUnits / (86_400 * 1_000_000))
	for _, tc := range []struct {
		lim     core.Limit
		invalid []core.Algorithm
	}{
		{core.PerSecond(10).WithBurst(50), nil},
		{core.PerDay(1_000_000), []core.Algorithm{algorithms.SlidingWindowCounter, algorithms.SlidingWindowLog}},
		{core.PerDay(200_000), []core.Algorithm{algorithms.SlidingWindowCounter, algorithms.SlidingWindowLog}},
		{counterMax, []core.Algorithm{algorithms.SlidingWindowLog}},
		{core.PerDay(counterMax.Rate() + 1), []core.Algorithm{algorithms.SlidingWindowCounter, algorithms.SlidingWindowLog}},
		{core.Per(core.MaxUnits, time.Microsecond), []core.Algorithm{algorithms.SlidingWindowLog}},
		{core.PerSecond(algorithms.MaxLogRate), nil},
		{core.PerSecond(algorithms.MaxLogRate + 1), []core.Algorithm{algorithms.SlidingWindowLog}},
		{core.Every(1500 * time.Microsecond), nil},
	} {
		if err := tc.lim.Validate(); err != nil {
			t.Fatalf("%v: Limit.Validate() = %v, want nil", tc.lim, err)
		}
		for _, alg := range algorithms.All() {
			wantErr := false
			for _, a := range tc.invalid {
				wantErr = wantErr || a == alg
			}
			err := alg.Validate(tc.lim)
			switch {
			case wantErr && !errors.Is(err, core.ErrInvalidLimit):
				t.Errorf("%s.Validate(%v) = %v, want an error wrapping ErrInvalidLimit", alg.Name(), tc.lim, err)
			case !wantErr && err != nil:
				t.Errorf("%s.Validate(%v) = %v, want nil", alg.Name(), tc.lim, err)
			}
			req := core.Request{Key: "k", Cost: 1, Terms: &core.Terms{Algorithm: alg, Limit: tc.lim}}
			if err := req.Validate(); wantErr != (err != nil) || (wantErr && !errors.Is(err, core.ErrInvalidLimit)) {
				t.Errorf("Request{%s, %v}.Validate() = %v, want error: %t", alg.Name(), tc.lim, err, wantErr)
			}
		}
	}
}

// TestLimitValidate: limits that cannot be decided with are reported,
// wrapping ErrInvalidLimit.
func TestLimitValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		lim  core.Limit
		ok   bool
	}{
		{"zero Limit", core.Limit{}, false},
		{"PerSecond(0)", core.PerSecond(0), false},
		{"PerSecond(-1)", core.PerSecond(-1), false},
		{"Every(0)", core.Every(0), false},
		{"Every(-1s)", core.Every(-time.Second), false},
		{"Every(500ns)", core.Every(500 * time.Nanosecond), false},
		{"Every(1500ns)", core.Every(1500 * time.Nanosecond), false},
		{"Per(1, 1ns)", core.Per(1, time.Nanosecond), false},
		{"burst -1", core.PerSecond(10).WithBurst(-1), false},
		{"burst 0", core.PerSecond(10).WithBurst(0), false},
		{"rate above 2^52", core.Per(core.MaxUnits+1, time.Hour), false},
		{"rate at 2^52", core.Per(core.MaxUnits, time.Hour).WithBurst(1), true},
		{"period above MaxPeriod", core.Per(1, core.MaxPeriod+time.Microsecond), false},
		{"period at MaxPeriod", core.Per(1, core.MaxPeriod), true},
		// 1/day: 86,400,000,000 units a token; a burst past 2^52 units.
		{"burst × unit above 2^52", core.PerDay(1).WithBurst(core.MaxUnits/86_400_000_000 + 1), false},
		{"burst × unit at most 2^52", core.PerDay(1).WithBurst(core.MaxUnits / 86_400_000_000), true},
		{"Every(1µs)", core.Every(time.Microsecond), true},
		{"PerSecond(10).WithBurst(50)", core.PerSecond(10).WithBurst(50), true},
		{"PerDay(1_000_000)", core.PerDay(1_000_000), true},
		{"Inf", core.Inf, true},
	} {
		err := tc.lim.Validate()
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s: Validate() = %v, want nil", tc.name, err)
		case !tc.ok && !errors.Is(err, core.ErrInvalidLimit):
			t.Errorf("%s: Validate() = %v, want an error wrapping ErrInvalidLimit", tc.name, err)
		}
	}
}

func TestLimitString(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		lim  core.Limit
		want string
	}{
		{core.PerSecond(10).WithBurst(50), "10 req/s (burst 50)"},
		{core.PerMinute(100), "100 req/min (burst 100)"},
		{core.Every(250 * time.Millisecond), "1 req/250ms (burst 1)"},
		{core.PerHour(5), "5 req/h (burst 5)"},
		{core.PerDay(1_000_000), "1000000 req/day (burst 1000000)"},
		{core.Every(1500 * time.Microsecond), "1 req/1.5ms (burst 1)"},
		{core.Inf, "unlimited"},
	} {
		if got := tc.lim.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}

// TestLimitUnits: the exact integer form of a rate is Rate and Period (µs)
// over their greatest common divisor.
func TestLimitUnits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		lim                core.Limit
		perToken, perMicro int64
	}{
		{core.PerDay(1_000_000), 86_400, 1},
		{core.PerSecond(10), 100_000, 1},
		{core.Per(3, time.Second), 1_000_000, 3},
		{core.Every(1500 * time.Microsecond), 1500, 1},
		{core.Per(3_000_000, time.Second), 1, 3},
	} {
		if u, r := tc.lim.Units(); u != tc.perToken || r != tc.perMicro {
			t.Errorf("%v: Units() = %d, %d; want %d, %d", tc.lim, u, r, tc.perToken, tc.perMicro)
		}
	}
}
