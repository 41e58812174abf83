package algorithms_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
)

// The fuzz targets decode their bytes into a trace of requests under one
// limit, run it through an algorithm, and check on every step the
// contracts every decision keeps (checkCall), a model of the algorithm that
// works from the list of admitted charges alone, and the algorithm's rate
// bound. FuzzLimitChange changes the limit between calls and checks the
// contracts alone. The seeds run with a plain go test.

// maxOps bounds a trace, so that one fuzz execution stays cheap.
const maxOps = 200

// op is one request of a trace.
type op struct {
	lim  core.Limit
	gap  int64 // µs the caller's clock moves before the request; negative steps it back
	cost int64
	peek bool
}

// decodeOps reads a trace from data for alg. With one limit it reads three
// bytes an operation; with several, a fourth picks the operation's limit.
//
//	gap:   low 2 bits pick a scale for n = the high 6 bits: n µs,
//	       n/32 periods, n/8 emission intervals or n/8 periods
//	cost:  read as the flags say
//	flags: bits 0–1 both set: a peek; bits 2–4 all set: the clock steps
//	       back by the gap; bits 5–6 set, 7 clear: a cost above capacity;
//	       bit 7 set: any cost from 0 to capacity; else a small cost, 1 to 4
//	limit: an index into limits
func decodeOps(data []byte, alg core.Algorithm, limits ...core.Limit) []op {
	size := 3
	if len(limits) > 1 {
		size = 4
	}
	var ops []op
	for len(data) >= size && len(ops) < maxOps {
		g, c, f := int64(data[0]), int64(data[1]), data[2]
		o := op{lim: limits[0]}
		if size == 4 {
			o.lim = limits[int(data[3])%len(limits)]
		}
		data = data[size:]
		period, capa := o.lim.PeriodMicros(), capacity(alg, o.lim)
		switch n := g >> 2; g & 3 {
		case 0:
			o.gap = n
		case 1:
			o.gap = n * period / 32
		case 2:
			o.gap = n * max(period/o.lim.Rate(), 1) / 8
		case 3:
			o.gap = n * period / 8
		}
		if f>>2&7 == 7 {
			o.gap = -o.gap
		}
		switch {
		case f&0xe0 == 0x60:
			o.cost = capa + 1 + c%4
		case f&0x80 != 0:
			o.cost = c % (capa + 1)
		default:
			o.cost = 1 + c%min(capa, 4)
		}
		o.peek = f&3 == 3
		ops = append(ops, o)
	}
	return ops
}

// charge is a request that was admitted and charged: cost at at µs.
type charge struct{ at, cost int64 }

// model is what a fuzz target holds an algorithm to, beyond the invariants
// every algorithm shares.
type model struct {
	// decide returns the decision the algorithm must reach for cost at
	// now (µs), given the charges admitted so far, oldest first; now is
	// never before the last of them.
	decide func(h []charge, now, cost int64) core.Decision
	// bound returns a description of how the newest charge in h breaks
	// the algorithm's rate bound, or "" when it does not.
	bound func(h []charge) string
}

// fuzzLimit builds the limit a fuzz execution runs under from its integer
// parameters, clamped into limits every algorithm accepts. maxRate bounds
// the rate.
func fuzzLimit(t *testing.T, alg core.Algorithm, rate uint16, period uint32, burst uint16, maxRate int64) core.Limit {
	t.Helper()
	lim := core.Per(1+int64(rate)%maxRate, time.Duration(1+int64(period))*time.Microsecond).WithBurst(1 + int64(burst)%256)
	if err := lim.Validate(); err != nil {
		t.Fatalf("%v: %v", lim, err)
	}
	if err := alg.Validate(lim); err != nil {
		t.Fatalf("%v: %v", lim, err)
	}
	return lim
}

// checkCall checks what every decision must satisfy, whatever came before
// and under whichever limit the state was written: d is alg's decision for
// o at now, before the state it was decided on and s the state after. It
// returns the state the decision speaks of (after the charge, if a peek
// was admitted), and a description of what is wrong, or "".
func checkCall(alg core.Algorithm, before, s core.State, now int64, o op, d core.Decision) (core.State, string) {
	lim, capa := o.lim, capacity(alg, o.lim)
	eff := max(now, before.Last) // the instant the algorithm decides at
	switch {
	case d.Limit != capa:
		return s, fmt.Sprintf("Limit = %d, want %d", d.Limit, capa)
	case d.Remaining < 0 || d.Remaining > capa:
		return s, fmt.Sprintf("Remaining = %d, want 0 to %d", d.Remaining, capa)
	case d.Allowed != (d.RetryAfter == 0):
		return s, fmt.Sprintf("RetryAfter = %v with Allowed = %t, want zero exactly when allowed", d.RetryAfter, d.Allowed)
	case (o.cost > capa) != d.Unsatisfiable():
		return s, fmt.Sprintf("Unsatisfiable() = %t for cost %d and capacity %d", d.Unsatisfiable(), o.cost, capa)
	case d.RetryAfter < 0 || (d.RetryAfter%time.Microsecond != 0 && d.RetryAfter != core.RetryNever):
		return s, fmt.Sprintf("RetryAfter = %v, want a whole number of µs ≥ 0", d.RetryAfter)
	case d.ResetAfter < 0 || d.ResetAfter%time.Microsecond != 0:
		return s, fmt.Sprintf("ResetAfter = %v, want a whole number of µs ≥ 0", d.ResetAfter)
	case d.Source != core.SourceStore:
		return s, fmt.Sprintf("Source = %v, want %v", d.Source, core.SourceStore)
	case o.cost == 0 && !d.Allowed:
		return s, "a cost of 0 was denied; it is always admitted"
	case d.Level.PerToken <= 0:
		return s, fmt.Sprintf("Level = %+v, want a positive PerToken", d.Level)
	case d.Remaining != max(floorDiv(d.Level.Units, d.Level.PerToken), 0):
		return s, fmt.Sprintf("Remaining = %d, Level %d/%d: want the level's whole tokens", d.Remaining, d.Level.Units, d.Level.PerToken)
	case d.Level.Units > capa*d.Level.PerToken:
		return s, fmt.Sprintf("Level = %d/%d, above the capacity %d", d.Level.Units, d.Level.PerToken, capa)
	}

	// A partial admission charges what a decision of cost 0 reports as
	// Remaining: the largest cost the algorithm admits at the instant.
	fits := clone(before)
	r := apply(alg, &fits, now, core.Request{Op: core.OpPeek, Terms: &core.Terms{Limit: lim}}).Remaining
	if r >= 1 {
		if dd := apply(alg, &fits, now, core.Request{Cost: r, Op: core.OpPeek, Terms: &core.Terms{Limit: lim}}); !dd.Allowed {
			return s, fmt.Sprintf("a cost of 0 reports Remaining %d, but a cost of %d is denied: %+v", r, r, dd)
		}
	}
	if r < capa {
		if dd := apply(alg, &fits, now, core.Request{Cost: r + 1, Op: core.OpPeek, Terms: &core.Terms{Limit: lim}}); dd.Allowed {
			return s, fmt.Sprintf("a cost of 0 reports Remaining %d, but a cost of %d is admitted: %+v", r, r+1, dd)
		}
	}

	// The state.
	if (o.peek || !d.Allowed) && !sameState(s, before) {
		return s, fmt.Sprintf("state changed from %s to %s; a peek or a denial must change nothing", relState(before), relState(s))
	}
	if s.Last < before.Last || s.Last > eff {
		return s, fmt.Sprintf("State.T went from %s to %s, want it between the two", relState(before), relState(s))
	}
	if alg != algorithms.SlidingWindowLog && s.Log != nil {
		return s, fmt.Sprintf("Log = %v, want nil", s.Log)
	}
	if alg == algorithms.SlidingWindowLog {
		if msg := checkLog(s); msg != "" {
			return s, fmt.Sprintf("state %s: %s", relState(s), msg)
		}
	}

	// A peek gets the real call's decision.
	after := s
	if o.peek {
		after = clone(before)
		if real := apply(alg, &after, now, core.Request{Cost: o.cost, Terms: &core.Terms{Limit: lim}}); real != d {
			return s, fmt.Sprintf("AllowN at the same instant = %+v, want what the peek said", real)
		}
	}

	// RetryAfter is exact: the same request passes at eff+RetryAfter,
	// not a microsecond earlier.
	if !d.Allowed && !d.Unsatisfiable() {
		ra := d.RetryAfter.Microseconds()
		early, onTime := clone(before), clone(before)
		if dd := apply(alg, &early, eff+ra-1, core.Request{Cost: o.cost, Terms: &core.Terms{Limit: lim}}); dd.Allowed {
			return s, fmt.Sprintf("retried %v later, a microsecond early, it passed: %+v", d.RetryAfter-time.Microsecond, dd)
		}
		if dd := apply(alg, &onTime, eff+ra, core.Request{Cost: o.cost, Terms: &core.Terms{Limit: lim}}); !dd.Allowed {
			return s, fmt.Sprintf("retried %v later it was denied: %+v", d.RetryAfter, dd)
		}
	}

	// ResetAfter is exact: after it the key decides as a fresh one,
	// admitting its whole capacity; a microsecond before, it does not.
	rs := d.ResetAfter.Microseconds()
	rested, fresh := clone(after), core.State{}
	got := apply(alg, &rested, eff+rs, core.Request{Cost: capa, Terms: &core.Terms{Limit: lim}})
	if want := apply(alg, &fresh, eff+rs, core.Request{Cost: capa, Terms: &core.Terms{Limit: lim}}); got != want || !got.Allowed {
		return s, fmt.Sprintf("after ResetAfter, AllowN(+%v, %d) = %+v, want as on a fresh key: %+v", d.ResetAfter, capa, got, want)
	}
	if rs > 0 {
		early := clone(after)
		if dd := apply(alg, &early, eff+rs-1, core.Request{Cost: capa, Terms: &core.Terms{Limit: lim}}); dd.Allowed {
			return s, fmt.Sprintf("AllowN(+%v, %d) passed a microsecond before ResetAfter: %+v", d.ResetAfter-time.Microsecond, capa, dd)
		}
	}
	return after, ""
}

// callName names the call o makes at now, and its decision d.
func callName(o op, now int64, before core.State, d core.Decision) string {
	name := fmt.Sprintf("%s = %+v", step{at: micros(now - t0), cost: o.cost, peek: o.peek}.name(), d)
	if now < before.Last {
		name += fmt.Sprintf(" (decided at %s)", offset(micros(before.Last-t0)))
	}
	return name
}

// runTrace applies the trace in data to a fresh state with alg under lim
// and checks every call with checkCall, against m, and for what holds
// under a fixed limit: the Horizon and the rate bound.
func runTrace(t *testing.T, alg core.Algorithm, lim core.Limit, data []byte, m model) {
	t.Helper()
	capa := capacity(alg, lim)
	horizon := alg.Horizon(lim)
	if horizon <= 0 || horizon%time.Microsecond != 0 {
		t.Fatalf("%v: Horizon = %v, want a positive whole number of µs", lim, horizon)
	}
	var (
		s   core.State
		h   []charge
		now = t0
	)
	for i, o := range decodeOps(data, alg, lim) {
		now += o.gap
		before := clone(s)
		eff := max(now, before.Last)
		d := apply(alg, &s, now, core.Request{Cost: o.cost, Op: peekIf(o.peek), Terms: &core.Terms{Limit: lim}})
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("%v: op %d: %s: %s", lim, i, callName(o, now, before, d), fmt.Sprintf(format, args...))
		}
		after, msg := checkCall(alg, before, s, now, o, d)
		if msg != "" {
			fail("%s", msg)
		}
		if alg == algorithms.SlidingWindowLog && s.Vals[algorithms.LogCost] > lim.Rate() {
			fail("state %s logs more than the rate", relState(s))
		}
		if want := m.decide(h, eff, o.cost); d != want {
			fail("want %+v", want)
		}

		// Horizon: a state left alone that long decides as a fresh one.
		if after.Last != 0 {
			at := max(after.Last+horizon.Microseconds(), eff)
			for _, cost := range []int64{1, capa} {
				idle, fresh := clone(after), core.State{}
				got := apply(alg, &idle, at, core.Request{Cost: cost, Terms: &core.Terms{Limit: lim}})
				if want := apply(alg, &fresh, at, core.Request{Cost: cost, Terms: &core.Terms{Limit: lim}}); got != want {
					fail("left alone for the Horizon %v, AllowN(%s, %d) = %+v, want as on a fresh key: %+v", horizon, offset(micros(at-t0)), cost, got, want)
				}
			}
		}

		// The rate bound, over everything admitted so far.
		if d.Allowed && !o.peek && o.cost > 0 {
			h = append(h, charge{eff, o.cost})
			if msg := m.bound(h); msg != "" {
				fail("%s", msg)
			}
		}
	}
}

// switchLimits are the limits a trace that changes its limit picks from:
// other rates, bursts and periods, periods that share window boundaries
// and periods that do not.
var switchLimits = []core.Limit{
	core.PerSecond(10),
	core.PerSecond(10).WithBurst(50),
	core.PerSecond(4),
	core.PerSecond(30).WithBurst(2),
	core.Per(3, time.Second).WithBurst(7),
	core.Per(10, 2*time.Second),
	core.Per(10, 100*time.Millisecond),
	core.Per(7, 1300*time.Millisecond).WithBurst(3),
	core.PerMinute(20),
	core.Every(1500 * time.Microsecond),
	core.PerSecond(1),
}

// runSwitchingTrace applies the trace in data to a fresh state with alg,
// each call under a limit picked from switchLimits, and checks every call
// with checkCall: whatever the algorithm does with state written under
// another limit, its decisions keep their contracts.
func runSwitchingTrace(t *testing.T, alg core.Algorithm, data []byte) {
	t.Helper()
	var s core.State
	now := t0
	for i, o := range decodeOps(data, alg, switchLimits...) {
		now += o.gap
		before := clone(s)
		d := apply(alg, &s, now, core.Request{Cost: o.cost, Op: peekIf(o.peek), Terms: &core.Terms{Limit: o.lim}})
		if _, msg := checkCall(alg, before, s, now, o, d); msg != "" {
			t.Fatalf("op %d: %s under %v, state %s: %s", i, callName(o, now, before, d), o.lim, relState(before), msg)
		}
	}
}

// checkLog checks what the sliding window log documents of its state: its
// cost is the total of the live log, one entry per instant in time order,
// and the slice is compacted once half of it is dead.
func checkLog(s core.State) string {
	if s.Vals[algorithms.LogFirst] < 0 || s.Vals[algorithms.LogFirst] > int64(len(s.Log)) {
		return "the first live entry is outside the log"
	}
	var total int64
	for i, e := range s.Log[s.Vals[algorithms.LogFirst]:] {
		if e.Cost <= 0 {
			return fmt.Sprintf("entry %d has cost %d", i, e.Cost)
		}
		if i > 0 && e.At <= s.Log[int(s.Vals[algorithms.LogFirst])+i-1].At {
			return "entries are not one per instant in time order"
		}
		total += e.Cost
	}
	switch {
	case total != s.Vals[algorithms.LogCost]:
		return fmt.Sprintf("cost = %d, want the total of the live log, %d", s.Vals[algorithms.LogCost], total)
	case 2*s.Vals[algorithms.LogFirst] > int64(len(s.Log)):
		return fmt.Sprintf("%d of %d entries are dead; want the log compacted", s.Vals[algorithms.LogFirst], len(s.Log))
	}
	return ""
}

func micros(n int64) time.Duration { return time.Duration(n) * time.Microsecond }

// ceilDiv is ⌈a/b⌉ for a ≥ 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// floorDiv is ⌊a/b⌋ for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// bucketModel is the token bucket in tokens × Period, refilling Rate each
// microsecond: the same rate as Units gives, without reducing it. Its
// level is reported in the units of [core.Limit.Units], Period/g to a
// token for g = gcd(Rate, Period), which divides every level the model
// reaches.
func bucketModel(lim core.Limit) model {
	rate, period, burst := lim.Rate(), lim.PeriodMicros(), lim.Burst()
	full := burst * period
	u, _ := lim.Units()
	g := period / u
	lv := func(level int64) core.Level { return core.Level{Units: level / g, PerToken: u} }
	refill := func(level, dt int64) int64 {
		if dt >= ceilDiv(full-level, rate) {
			return full
		}
		return level + dt*rate
	}
	return model{
		decide: func(h []charge, now, cost int64) core.Decision {
			level := full
			for i, c := range h {
				if i > 0 {
					level = refill(level, c.at-h[i-1].at)
				}
				level -= c.cost * period
			}
			if len(h) > 0 {
				level = refill(level, now-h[len(h)-1].at)
			}
			reset := func(level int64) time.Duration { return micros(ceilDiv(full-level, rate)) }
			switch {
			case cost > burst:
				return core.Decision{Limit: burst, Remaining: level / period, Level: lv(level), RetryAfter: core.RetryNever, ResetAfter: reset(level)}
			case level < cost*period:
				return core.Decision{Limit: burst, Remaining: level / period, Level: lv(level), RetryAfter: micros(ceilDiv(cost*period-level, rate)), ResetAfter: reset(level)}
			}
			level -= cost * period
			return core.Decision{Allowed: true, Limit: burst, Remaining: level / period, Level: lv(level), ResetAfter: reset(level)}
		},
		// In any interval [a, b] the bucket admits at most its burst and
		// what refills in b − a.
		bound: func(h []charge) string {
			last := h[len(h)-1]
			var sum int64
			for i := len(h) - 1; i >= 0; i-- {
				sum += h[i].cost
				if limit := burst + rate*(last.at-h[i].at)/period; sum > limit {
					return fmt.Sprintf("admitted %d in [%s, %s], more than burst + rate × %v = %d",
						sum, offset(micros(h[i].at-t0)), offset(micros(last.at-t0)), micros(last.at-h[i].at), limit)
				}
			}
			return ""
		},
	}
}

// windowSum is the total charged in [from, to).
func windowSum(h []charge, from, to int64) int64 {
	var sum int64
	for _, c := range h {
		if c.at >= from && c.at < to {
			sum += c.cost
		}
	}
	return sum
}

// alignedBound checks that no epoch-aligned window of one period holds more
// than the rate.
func alignedBound(lim core.Limit) func(h []charge) string {
	return func(h []charge) string {
		at := h[len(h)-1].at
		start := at - at%lim.PeriodMicros()
		if sum := windowSum(h, start, start+lim.PeriodMicros()); sum > lim.Rate() {
			return fmt.Sprintf("admitted %d in the window [%s, +%v), more than the rate %d", sum, offset(micros(start-t0)), lim.Period(), lim.Rate())
		}
		return ""
	}
}

func fixedWindowModel(lim core.Limit) model {
	rate, period := lim.Rate(), lim.PeriodMicros()
	return model{
		decide: func(h []charge, now, cost int64) core.Decision {
			start := now - now%period
			count := windowSum(h, start, start+period)
			untilEnd := micros(start + period - now)
			reset := func(count int64) time.Duration {
				if count == 0 {
					return 0
				}
				return untilEnd
			}
			switch {
			case cost > rate:
				return core.Decision{Limit: rate, Remaining: rate - count, Level: whole(rate - count), RetryAfter: core.RetryNever, ResetAfter: reset(count)}
			case count+cost > rate:
				return core.Decision{Limit: rate, Remaining: rate - count, Level: whole(rate - count), RetryAfter: untilEnd, ResetAfter: untilEnd}
			}
			return core.Decision{Allowed: true, Limit: rate, Remaining: rate - count - cost, Level: whole(rate - count - cost), ResetAfter: reset(count + cost)}
		},
		bound: alignedBound(lim),
	}
}

// slidingCounterModel weighs the previous window's count by the share of it
// a window of one period ending now still covers, as documented; it finds
// the wait by searching the instants at which the request would pass.
func slidingCounterModel(lim core.Limit) model {
	rate, period := lim.Rate(), lim.PeriodMicros()
	return model{
		decide: func(h []charge, now, cost int64) core.Decision {
			start := now - now%period
			cur, prev := windowSum(h, start, start+period), windowSum(h, start-period, start)
			// passes reports whether the request would pass at t ≥ now
			// if nothing else were charged.
			passes := func(t int64) bool {
				switch {
				case t < start+period:
					return prev*(start+period-t)+(cur+cost)*period <= rate*period
				case t < start+2*period:
					return cur*(start+2*period-t)+cost*period <= rate*period
				}
				return cost <= rate
			}
			left := start + period - now
			remaining := func(cur int64) int64 { return max(rate-cur-ceilDiv(prev*left, period), 0) }
			// The level: rate less what the window covers, in periods of
			// a token.
			level := func(cur int64) core.Level { return core.Level{Units: (rate-cur)*period - prev*left, PerToken: period} }
			reset := func(cur int64) time.Duration {
				switch {
				case cur > 0:
					return micros(start + 2*period - now)
				case prev > 0:
					return micros(start + period - now)
				}
				return 0
			}
			switch {
			case cost > rate:
				return core.Decision{Limit: rate, Remaining: remaining(cur), Level: level(cur), RetryAfter: core.RetryNever, ResetAfter: reset(cur)}
			case !passes(now):
				lo, hi := now, start+2*period // passes(lo) is false, passes(hi) true
				for hi-lo > 1 {
					if mid := lo + (hi-lo)/2; passes(mid) {
						hi = mid
					} else {
						lo = mid
					}
				}
				return core.Decision{Limit: rate, Remaining: remaining(cur), Level: level(cur), RetryAfter: micros(hi - now), ResetAfter: reset(cur)}
			}
			return core.Decision{Allowed: true, Limit: rate, Remaining: remaining(cur + cost), Level: level(cur + cost), ResetAfter: reset(cur + cost)}
		},
		bound: alignedBound(lim),
	}
}

// slidingLogModel admits while the charges in (now − Period, now] plus the
// cost stay within the rate.
func slidingLogModel(lim core.Limit) model {
	rate, period := lim.Rate(), lim.PeriodMicros()
	return model{
		decide: func(h []charge, now, cost int64) core.Decision {
			first := len(h)
			for first > 0 && h[first-1].at > now-period {
				first--
			}
			live := h[first:]
			var count int64
			for _, c := range live {
				count += c.cost
			}
			reset := micros(0)
			if count > 0 {
				reset = micros(live[len(live)-1].at + period - now)
			}
			switch {
			case cost > rate:
				return core.Decision{Limit: rate, Remaining: max(rate-count, 0), Level: whole(rate - count), RetryAfter: core.RetryNever, ResetAfter: reset}
			case count+cost > rate:
				freed, i := int64(0), 0
				for ; count-freed+cost > rate; i++ {
					freed += live[i].cost
				}
				return core.Decision{Limit: rate, Remaining: max(rate-count, 0), Level: whole(rate - count), RetryAfter: micros(live[i-1].at + period - now), ResetAfter: reset}
			}
			if cost > 0 {
				reset = micros(period)
			}
			return core.Decision{Allowed: true, Limit: rate, Remaining: rate - count - cost, Level: whole(rate - count - cost), ResetAfter: reset}
		},
		// No window (t − Period, t] holds more than the rate; the fullest
		// ends at a charge.
		bound: func(h []charge) string {
			last := h[len(h)-1].at
			if sum := windowSum(h, last-period+1, last+1); sum > rate {
				return fmt.Sprintf("admitted %d in (%s, %s], more than the rate %d", sum, offset(micros(last-period-t0)), offset(micros(last-t0)), rate)
			}
			return ""
		},
	}
}

// addSeeds gives a fuzz target its seed corpus: hand-made traces (floods,
// boundaries, a clock stepping back, costs above capacity) under a few
// limits, and random traces.
func addSeeds(f *testing.F) {
	// A flood of small costs at one instant, then a pause of a period.
	flood := make([]byte, 0, 3*60)
	for range 50 {
		flood = append(flood, 0, 0, 0)
	}
	flood = append(flood, 32<<2|1, 0, 0) // one period
	for range 9 {
		flood = append(flood, 0, 0, 0)
	}
	// Costs of every size, peeks, steps back, costs above capacity.
	mixed := []byte{
		0, 2, 0x80, 0, 6, 0x80, 3 << 2, 1, 3, 1 << 2, 9, 0x1c, // cost 3, 7, then a peek, then 1µs back
		1<<2 | 2, 1, 0, 63<<2 | 3, 255, 0x80, 0, 0, 0x60, 0, 0, 0xe0, // then a cost above capacity
		16<<2 | 1, 3, 0x9c, 16<<2 | 1, 3, 0x80, 7<<2 | 2, 0, 0x03,
	}
	// Steps of an emission interval or of a microsecond, sliding over
	// window boundaries.
	edges := make([]byte, 0, 3*120)
	for i := range 120 {
		edges = append(edges, byte(i%64)<<2|byte(i%3), byte(i), byte(i*37))
	}
	for _, data := range [][]byte{flood, mixed, edges, nil} {
		f.Add(data, uint16(9), uint32(999_999), uint16(49))     // 10/s, burst 50
		f.Add(data, uint16(2), uint32(999_999), uint16(6))      // 3/s, burst 7
		f.Add(data, uint16(9), uint32(59_999_999), uint16(9))   // 10/min
		f.Add(data, uint16(0), uint32(1_499), uint16(0))        // 1 per 1.5ms
		f.Add(data, uint16(99), uint32(0), uint16(3))           // 100/µs
		f.Add(data, uint16(6), uint32(12), uint16(255))         // 7 per 13µs
		f.Add(data, uint16(199), uint32(86_399_999), uint16(1)) // 200 per 86.4s
	}
	rng := rand.New(rand.NewPCG(7, 11))
	for range 24 {
		data := make([]byte, 3*(50+rng.IntN(maxOps-50)))
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		f.Add(data, uint16(rng.Uint32()), rng.Uint32N(10_000_000), uint16(rng.Uint32()))
	}
}

func FuzzTokenBucket(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte, rate uint16, period uint32, burst uint16) {
		lim := fuzzLimit(t, algorithms.TokenBucket, rate, period, burst, 1000)
		runTrace(t, algorithms.TokenBucket, lim, data, bucketModel(lim))
	})
}

// FuzzGCRA holds GCRA to the token bucket's model: under a fixed limit the
// two decide alike.
func FuzzGCRA(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte, rate uint16, period uint32, burst uint16) {
		lim := fuzzLimit(t, algorithms.GCRA, rate, period, burst, 1000)
		runTrace(t, algorithms.GCRA, lim, data, bucketModel(lim))
	})
}

// The window algorithms take no notice of the burst; the fuzz limits have
// random ones to show it.

func FuzzFixedWindow(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte, rate uint16, period uint32, burst uint16) {
		lim := fuzzLimit(t, algorithms.FixedWindow, rate, period, burst, 200)
		runTrace(t, algorithms.FixedWindow, lim, data, fixedWindowModel(lim))
	})
}

func FuzzSlidingWindowCounter(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte, rate uint16, period uint32, burst uint16) {
		lim := fuzzLimit(t, algorithms.SlidingWindowCounter, rate, period, burst, 200)
		runTrace(t, algorithms.SlidingWindowCounter, lim, data, slidingCounterModel(lim))
	})
}

func FuzzSlidingWindowLog(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte, rate uint16, period uint32, burst uint16) {
		lim := fuzzLimit(t, algorithms.SlidingWindowLog, rate, period, burst, 200)
		runTrace(t, algorithms.SlidingWindowLog, lim, data, slidingLogModel(lim))
	})
}

// FuzzLimitChange runs one algorithm, picked by alg, through a trace whose
// calls change the limit, and checks each decision's contracts.
func FuzzLimitChange(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 5))
	for i := range 4 * len(algorithms.All()) {
		data := make([]byte, 4*(20+rng.IntN(maxOps-20)))
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		f.Add(data, uint8(i))
	}
	f.Fuzz(func(t *testing.T, data []byte, alg uint8) {
		all := algorithms.All()
		runSwitchingTrace(t, all[int(alg)%len(all)], data)
	})
}
