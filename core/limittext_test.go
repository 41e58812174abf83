package core_test

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
)

// TestParseLimit parses every form the text form has, and checks what it
// parses to and how that limit writes itself.
func TestParseLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want core.Limit
		text string // the canonical form; "" if in is canonical
	}{
		{"100/min", core.PerMinute(100), ""},
		{"10/s burst 50", core.PerSecond(10).WithBurst(50), ""},
		{"10/s burst 5", core.PerSecond(10).WithBurst(5), ""},
		{"1000/day", core.PerDay(1000), ""},
		{"5/h", core.PerHour(5), ""},
		{"1/250ms", core.Every(250 * time.Millisecond), ""},
		{"unlimited", core.Inf, ""},
		{"3/second", core.PerSecond(3), "3/s"},
		{"3/minute", core.PerMinute(3), "3/min"},
		{"3/hour burst 1", core.PerHour(3).WithBurst(1), "3/h burst 1"},
		{"10/s burst 10", core.PerSecond(10), "10/s"},
		{"  10/s \t burst   50\n", core.PerSecond(10).WithBurst(50), "10/s burst 50"},
		{" unlimited ", core.Inf, "unlimited"},
		// A Go duration that is a unit is written as the unit.
		{"10/1s", core.PerSecond(10), "10/s"},
		{"10/1000ms", core.PerSecond(10), "10/s"},
		{"10/60s", core.PerMinute(10), "10/min"},
		{"10/1h", core.PerHour(10), "10/h"},
		{"10/24h", core.PerDay(10), "10/day"},
		// Periods that are not a whole unit.
		{"7/1.5s", core.Per(7, 1500*time.Millisecond), ""},
		{"7/90s", core.Per(7, 90*time.Second), "7/1m30s"},
		{"7/1h30m", core.Per(7, 90*time.Minute), ""},
		{"7/2m", core.Per(7, 2*time.Minute), ""},
		{"7/2h0m0s", core.Per(7, 2*time.Hour), "7/2h"},
		{"7/48h", core.Per(7, 48*time.Hour), ""},
		{"7/1h0m0.5s", core.Per(7, time.Hour+500*time.Millisecond), ""},
		{"1/1us", core.Per(1, time.Microsecond), "1/1µs"},
		{"1/1µs", core.Per(1, time.Microsecond), ""},
		{"1/1μs", core.Per(1, time.Microsecond), "1/1µs"}, // Greek mu
		{"1/1500us", core.Per(1, 1500*time.Microsecond), "1/1.5ms"},
		{"010/s", core.PerSecond(10), "10/s"},
		// The bounds: rate and burst × units per token up to 2^52, the
		// period up to MaxPeriod.
		{"4503599627370496/1µs", core.Per(core.MaxUnits, time.Microsecond), ""},
		{"1/1µs burst 4503599627370496", core.Per(1, time.Microsecond).WithBurst(core.MaxUnits), ""},
		{"7/s burst 4503599627", core.PerSecond(7).WithBurst(core.MaxUnits / 1_000_000), ""},
		{"10/s burst 45035996273", core.PerSecond(10).WithBurst(core.MaxUnits / 100_000), ""},
		{"1/312749h58m26.842624s", core.Every(core.MaxPeriod), ""},
		{"1/312749h58m26.842624s burst 4", core.Every(core.MaxPeriod).WithBurst(4), ""},
		{"4503599627370496/312749h58m26.842624s", core.Per(core.MaxUnits, core.MaxPeriod), ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := core.ParseLimit(tt.in)
			if err != nil {
				t.Fatalf("ParseLimit(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Errorf("ParseLimit(%q) = %v, want %v", tt.in, got, tt.want)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("ParseLimit(%q).Validate() = %v", tt.in, err)
			}
			want := tt.text
			if want == "" {
				want = tt.in
			}
			text, err := got.MarshalText()
			if err != nil || string(text) != want {
				t.Errorf("ParseLimit(%q).MarshalText() = %q, %v; want %q", tt.in, text, err, want)
			}
		})
	}
}

// TestParseLimitErrors checks that every malformed or invalid text is an
// error wrapping ErrInvalidLimit that quotes the text and names its fault.
func TestParseLimitErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string
	}{
		{"", `"": empty; want N/PERIOD`},
		{" \t", `empty; want N/PERIOD`},
		{"10", `"10": want N/PERIOD, such as 100/min`},
		{"10 /s", `"10 /s": want N/PERIOD`},
		{"burst 50", `"burst 50": want N/PERIOD`},
		{"ten/s", `rate "ten" is not a whole number`},
		{"/s", `rate "" is not a whole number`},
		{"+10/s", `rate "+10" is not a whole number`},
		{"1.5/s", `rate "1.5" is not a whole number`},
		{"1_000/s", `rate "1_000" is not a whole number`},
		{"99999999999999999999/s", "rate 99999999999999999999 is out of range (1 to 2^52)"},
		{"0/s", "rate 0 must be at least 1"},
		{"-3/s", "rate -3 must be at least 1"},
		{"4503599627370497/s", "rate 4503599627370497 exceeds 2^52"},
		{"10/fortnight", `"10/fortnight": unknown unit "fortnight" (want s, min, h, day or a duration such as 250ms)`},
		{"10/", `unknown unit ""`},
		{"10/S", `unknown unit "S"`},
		{"10/m", `unknown unit "m"`},
		{"10/2min", `unknown unit "2min"`},
		{"10/s/s", `unknown unit "s/s"`},
		{"10/0s", "period must be positive"},
		{"10/-1s", "period must be positive"},
		{"10/500ns", "period must be at least 1µs"},
		{"10/1500ns", "period must be a whole number of microseconds"},
		{"1/312749h58m26.842625s", "period 312749h58m26.842625s is longer than 312749h58m26.842624s"},
		{"1/10000000h", `unknown unit "10000000h"`}, // beyond time.Duration
		{"10/s burst", "burst wants a number after it"},
		{"10/s burst fifty", `burst "fifty" is not a whole number`},
		{"10/s burst 0", "burst 0 must be at least 1"},
		{"10/s burst -5", "burst -5 must be at least 1"},
		{"10/s burst 99999999999999999999", "burst 99999999999999999999 is out of range"},
		{"10/s burst 45035996274", "burst × unit exceeds 2^52"},
		{"1/s burst 4503599628", "burst × unit exceeds 2^52"},
		{"1/1µs burst 4503599627370497", "burst × unit exceeds 2^52"},
		{"1/312749h58m26.842624s burst 5", "burst × unit exceeds 2^52"},
		{"10/s bursts 50", `unexpected "bursts" after the rate; want burst N`},
		{"10/s 50", `unexpected "50" after the rate`},
		{"10/s burst 50 60", `unexpected "60" after the burst`},
		{"10/s burst 50 burst 60", `unexpected "burst" after the burst`},
		{"unlimited burst 5", `unexpected "burst" after unlimited`},
		{"Unlimited", `"Unlimited": want N/PERIOD`},
		{"inf", `"inf": want N/PERIOD`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			l, err := core.ParseLimit(tt.in)
			if !errors.Is(err, core.ErrInvalidLimit) {
				t.Fatalf("ParseLimit(%q) = %v, %v; want an error wrapping ErrInvalidLimit", tt.in, l, err)
			}
			if l != (core.Limit{}) {
				t.Errorf("ParseLimit(%q) = %v with its error, want the zero Limit", tt.in, l)
			}
			prefix := fmt.Sprintf("sluice: invalid limit: %q: ", tt.in)
			if msg := err.Error(); !strings.HasPrefix(msg, prefix) || !strings.Contains(msg, tt.want) {
				t.Errorf("ParseLimit(%q) error = %q, want %q…%q", tt.in, msg, prefix, tt.want)
			}
		})
	}
}

// TestLimitTextRoundTrip builds limits with the constructors, over the
// units, periods that are none, and bursts at their bounds, and checks
// that each reads back from its text form as itself.
func TestLimitTextRoundTrip(t *testing.T) {
	t.Parallel()
	periods := []time.Duration{
		time.Microsecond, 3 * time.Microsecond, 250 * time.Millisecond, time.Second,
		1500 * time.Millisecond, time.Minute, 90 * time.Second, time.Hour,
		25 * time.Hour, 24 * time.Hour, 7 * 24 * time.Hour, time.Hour + time.Microsecond,
		core.MaxPeriod,
	}
	rates := []int64{1, 2, 7, 10, 999_999, 1_000_000, 1 << 40, core.MaxUnits - 1, core.MaxUnits}
	n := 0
	for _, p := range periods {
		for _, r := range rates {
			base := core.Per(r, p)
			if base.Validate() != nil {
				continue
			}
			perToken, _ := base.Units()
			top := core.MaxUnits / perToken
			for _, b := range []int64{1, 2, r - 1, r, r + 1, top - 1, top} {
				l := base.WithBurst(b)
				if l.Validate() != nil {
					continue
				}
				n++
				text, err := l.MarshalText()
				if err != nil {
					t.Fatalf("%v: MarshalText: %v", l, err)
				}
				got, err := core.ParseLimit(string(text))
				if err != nil || got != l {
					t.Errorf("ParseLimit(%q) = %v, %v; want %v", text, got, err, l)
				}
			}
		}
	}
	if n < 100 {
		t.Errorf("round-tripped only %d limits", n)
	}
	text, err := core.Inf.MarshalText()
	if got, perr := core.ParseLimit(string(text)); err != nil || perr != nil || got != core.Inf {
		t.Errorf("Inf: MarshalText = %q, %v; ParseLimit = %v, %v", text, err, got, perr)
	}
	if core.Inf.WithBurst(5) != core.Inf {
		t.Errorf("Inf.WithBurst(5) = %#v, want Inf", core.Inf.WithBurst(5))
	}
}

// TestMarshalTextInvalid checks that a limit Validate rejects has no text
// form.
func TestMarshalTextInvalid(t *testing.T) {
	t.Parallel()
	for _, l := range []core.Limit{
		{}, core.PerSecond(0), core.Every(0), core.Per(1, 1500*time.Nanosecond),
		core.PerSecond(10).WithBurst(0), core.PerSecond(1).WithBurst(core.MaxUnits),
	} {
		if text, err := l.MarshalText(); !errors.Is(err, core.ErrInvalidLimit) {
			t.Errorf("%#v.MarshalText() = %q, %v; want an error wrapping ErrInvalidLimit", l, text, err)
		}
	}
}

// TestUnmarshalText checks the uses MarshalText and UnmarshalText are for:
// JSON, and a flag defined with flag.TextVar.
func TestUnmarshalText(t *testing.T) {
	t.Parallel()
	var cfg struct {
		Limits []core.Limit `json:"limits"`
	}
	in := `{"limits":["10/s burst 50","1/250ms","unlimited","5/hour"]}`
	if err := json.Unmarshal([]byte(in), &cfg); err != nil {
		t.Fatalf("json.Unmarshal: %v", err)
	}
	want := []core.Limit{core.PerSecond(10).WithBurst(50), core.Every(250 * time.Millisecond), core.Inf, core.PerHour(5)}
	for i := range want {
		if cfg.Limits[i] != want[i] {
			t.Errorf("limits[%d] = %v, want %v", i, cfg.Limits[i], want[i])
		}
	}
	out, err := json.Marshal(cfg)
	if want := `{"limits":["10/s burst 50","1/250ms","unlimited","5/h"]}`; err != nil || string(out) != want {
		t.Errorf("json.Marshal = %s, %v; want %s", out, err, want)
	}
	if _, err := json.Marshal(core.PerSecond(0)); !errors.Is(err, core.ErrInvalidLimit) {
		t.Errorf("json.Marshal(PerSecond(0)) error = %v, want one wrapping ErrInvalidLimit", err)
	}

	// A failed UnmarshalText leaves the limit as it was.
	l := core.PerMinute(3)
	if err := l.UnmarshalText([]byte("3/fortnight")); !errors.Is(err, core.ErrInvalidLimit) || l != core.PerMinute(3) {
		t.Errorf("UnmarshalText(3/fortnight) = %v, leaving %v; want ErrInvalidLimit, leaving 3/min", err, l)
	}

	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var lim core.Limit
	fs.TextVar(&lim, "limit", core.PerSecond(10).WithBurst(50), "the `limit`")
	if lim != core.PerSecond(10).WithBurst(50) {
		t.Errorf("flag default = %v, want 10 req/s (burst 50)", lim)
	}
	if err := fs.Parse([]string{"-limit", "100/min burst 20"}); err != nil || lim != core.PerMinute(100).WithBurst(20) {
		t.Errorf("-limit '100/min burst 20': %v, %v", lim, err)
	}
	if err := fs.Parse([]string{"-limit", "10/fortnight"}); err == nil || !strings.Contains(err.Error(), `unknown unit "fortnight"`) {
		t.Errorf("-limit 10/fortnight: error %v, want one naming the unit", err)
	}
}

// FuzzParseLimit checks that ParseLimit never panics, that its errors wrap
// ErrInvalidLimit, that what it accepts is valid, and that a limit's text
// form reads back as the same limit and writes itself the same way.
func FuzzParseLimit(f *testing.F) {
	for _, s := range []string{
		"100/min", "10/s burst 50", "1000/day", "5/h", "1/250ms", "unlimited",
		"3/second", "3/minute", "3/hour", "7/1h30m", "7/1.5s", "1/1µs", "1/1us",
		"4503599627370496/1µs", "1/1µs burst 4503599627370496", "7/s burst 4503599627",
		"1/312749h58m26.842624s burst 4", "10/fortnight", "10/s burst", "", "0/s",
		"10/-1s", "10/1500ns", "99999999999999999999/s", "unlimited burst 5",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := core.ParseLimit(s)
		if err != nil {
			if !errors.Is(err, core.ErrInvalidLimit) {
				t.Fatalf("ParseLimit(%q) error %v does not wrap ErrInvalidLimit", s, err)
			}
			return
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("ParseLimit(%q) = %v, which Validate rejects: %v", s, l, err)
		}
		text, err := l.MarshalText()
		if err != nil {
			t.Fatalf("ParseLimit(%q).MarshalText(): %v", s, err)
		}
		again, err := core.ParseLimit(string(text))
		if err != nil || again != l {
			t.Fatalf("ParseLimit(%q) = %v; its text %q parses to %v, %v", s, l, text, again, err)
		}
		if text2, _ := again.MarshalText(); string(text2) != string(text) {
			t.Fatalf("ParseLimit(%q): text %q, then %q", s, text, text2)
		}
	})
}

// FuzzLimitText checks, for limits built with Per and WithBurst, that
// every valid one reads back from its text form as itself.
func FuzzLimitText(f *testing.F) {
	f.Add(int64(10), int64(1e6), int64(50))
	f.Add(int64(7), int64(1_500_000), int64(7))
	f.Add(int64(core.MaxUnits), int64(1), int64(core.MaxUnits))
	f.Add(int64(1), int64(core.MaxPeriod/time.Microsecond), int64(4))
	f.Fuzz(func(t *testing.T, rate, micros, burst int64) {
		if micros > int64(core.MaxPeriod/time.Microsecond)+1 || micros < -1 {
			micros %= int64(core.MaxPeriod/time.Microsecond) + 2
		}
		l := core.Per(rate, time.Duration(micros)*time.Microsecond).WithBurst(burst)
		text, err := l.MarshalText()
		if l.Validate() != nil {
			if err == nil {
				t.Fatalf("%#v: MarshalText = %q for an invalid limit", l, text)
			}
			return
		}
		if err != nil {
			t.Fatalf("%v: MarshalText: %v", l, err)
		}
		got, err := core.ParseLimit(string(text))
		if err != nil || got != l {
			t.Fatalf("ParseLimit(%q) = %v, %v; want %v", text, got, err, l)
		}
	})
}

func ExampleParseLimit() {
	for _, s := range []string{"100/min", "10/s burst 50", "1/250ms", "unlimited", "10/fortnight"} {
		l, err := core.ParseLimit(s)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(l)
	}
	// Output:
	// 100 req/min (burst 100)
	// 10 req/s (burst 50)
	// 1 req/250ms (burst 1)
	// unlimited
	// sluice: invalid limit: "10/fortnight": unknown unit "fortnight" (want s, min, h, day or a duration such as 250ms)
}

// A Limit is text in JSON (and in YAML, flags and environment variables).
func ExampleLimit_MarshalText() {
	type tier struct {
		Name  string     `json:"name"`
		Limit core.Limit `json:"limit"`
	}
	out, err := json.Marshal([]tier{
		{"free", core.PerMinute(100)},
		{"pro", core.PerSecond(10).WithBurst(50)},
		{"internal", core.Inf},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(out))

	var tiers []tier
	if err := json.Unmarshal([]byte(`[{"name":"batch","limit":"1000/day burst 10"}]`), &tiers); err != nil {
		log.Fatal(err)
	}
	fmt.Println(tiers[0].Name, tiers[0].Limit)
	// Output:
	// [{"name":"free","limit":"100/min"},{"name":"pro","limit":"10/s burst 50"},{"name":"internal","limit":"unlimited"}]
	// batch 1000 req/day (burst 10)
}
