package policy

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/core"
)

// spy is a store that records whether each call ran inline: on its
// caller's goroutine, under a callContext.
type spy struct {
	fake
	mu      sync.Mutex
	answers []bool // whether each call ran inline, in the order they began
}

func (s *spy) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	_, ok := ctx.(*callContext)
	s.mu.Lock()
	s.answers = append(s.answers, ok)
	s.mu.Unlock()
	return s.fake.Apply(ctx, req)
}

// inline returns whether each call ran inline so far.
func (s *spy) inline() []bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.answers)
}

// TestInlineWhileSteady checks when calls run inline: from NewBreaker
// while they succeed; detached from a failure until a window has passed
// without another, and while the circuit is half-open and for a window
// after it closes.
func TestInlineWhileSteady(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := &spy{}
		b := settled(newBreaker(t, s, WithProbes(1), WithTrip(2, 0.5)))
		ctx := context.Background()
		call := func() bool {
			t.Helper()
			n := len(s.inline())
			if _, err := b.Apply(ctx, req("k")); err != nil {
				t.Fatal(err)
			}
			seen := s.inline()
			if len(seen) != n+1 {
				t.Fatalf("%d store calls, want 1", len(seen)-n)
			}
			return seen[n]
		}
		if first, second := call(), call(); !first || !second {
			t.Errorf("calls of a new breaker ran detached, want inline")
		}
		s.set(refused, false)
		call()
		s.set(nil, false)
		if call() {
			t.Errorf("the call after a failure ran inline, want detached")
		}
		time.Sleep(b.cfg.window - time.Millisecond)
		if call() {
			t.Errorf("a call within a window of a failure ran inline, want detached")
		}
		time.Sleep(2 * time.Millisecond)
		if !call() {
			t.Errorf("a call a window after the last failure ran detached, want inline")
		}
		// Trip the circuit; its probe, and the calls a window after it
		// closes, run detached.
		s.set(refused, false)
		call()
		call()
		if b.State() != Open {
			t.Fatalf("state %v after 2 failures, want open", b.State())
		}
		s.set(nil, false)
		time.Sleep(DefaultOpenTimeout + b.cfg.window)
		if call() {
			t.Errorf("the half-open circuit's probe ran inline, want detached")
		}
		if b.State() != Closed {
			t.Fatalf("state %v after a successful probe, want closed", b.State())
		}
		if call() {
			t.Errorf("a call just after the circuit closed ran inline, want detached")
		}
		time.Sleep(b.cfg.window)
		if !call() {
			t.Errorf("a call a window after the circuit closed ran detached, want inline")
		}
	})
}

// TestInlineDespiteOddTimeouts checks that calls stay inline while a few
// of them time out among many that succeed, as a loaded service's do, and
// run detached once they time out in earnest: as many as may trip the
// circuit, and a twentieth of the calls.
func TestInlineDespiteOddTimeouts(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := &spy{}
		b := settled(newBreaker(t, s, WithTrip(5, 0.5)))
		ctx := context.Background()
		call := func() bool {
			t.Helper()
			n := len(s.inline())
			b.Apply(ctx, req("k"))
			return s.inline()[n]
		}
		// timeouts makes n calls that hang until their deadline, each
		// followed by one that succeeds: timeouts among successes, never
		// the run that would open the circuit (WithTrip).
		timeouts := func(n int) {
			for range n {
				s.set(nil, true)
				call()
				s.set(nil, false)
				call()
			}
		}
		for range 200 {
			call()
		}
		timeouts(6)
		if !call() {
			t.Fatalf("a call after 6 timeouts among 206 successes ran detached, want inline")
		}
		for range 100 {
			call()
		}
		timeouts(20)
		if b.State() != Closed {
			t.Fatalf("state %v after 26 timeouts among 347 calls, want closed", b.State())
		}
		if call() {
			t.Errorf("a call after 26 timeouts of 353 calls ran inline, want detached")
		}
		time.Sleep(callGrace * DefaultTimeout) // the detached call ends
	})
}

// TestDeadlines checks the calls' deadlines: calls within a tick share
// one deadline, which ends once the process has run for the timeout after
// the tick began; a context carries its caller's values, ends at the
// deadline and not with its caller, reports no wall-clock deadline, and a
// context derived from it ends with it, registered through AfterFunc.
func TestDeadlines(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const timeout = 16 * time.Millisecond
		var calls atomic.Uint64
		d := newDeadlines(timeout, timeout)
		m := startMeter(time.Now(), &calls, nil)
		defer m.close()
		d.m = m
		defer d.stop()
		tickLen := timeout / 16
		at := func() *tick {
			calls.Add(1)
			now := m.wallNow()
			m.awake(now)
			return d.at(now)
		}
		first := at()
		time.Sleep(tickLen - time.Nanosecond)
		if got := at(); got != first {
			t.Errorf("a call within the tick got a tick of its own")
		}
		time.Sleep(time.Nanosecond)
		began := time.Now()
		next := at()
		if next == first {
			t.Fatalf("a call a tick later shares the earlier tick")
		}

		type key struct{}
		caller, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
		ctx := &callContext{Context: caller, tick: next}
		if ctx.Value(key{}) != "v" {
			t.Errorf("the call's context lost its caller's value")
		}
		if dl, ok := ctx.Deadline(); ok {
			t.Errorf("Deadline() = %v, true; want none: the deadline is on the process clock", dl)
		}
		// Package context registers a child with a parent that has an
		// AfterFunc method instead of starting a goroutine to watch it.
		if _, ok := any(ctx).(interface{ AfterFunc(func()) func() bool }); !ok {
			t.Errorf("callContext has no AfterFunc: every context derived from it costs a goroutine")
		}
		child, stop := context.WithCancel(ctx)
		defer stop()
		cancel()
		synctest.Wait()
		if ctx.Err() != nil || child.Err() != nil {
			t.Errorf("the call's context ended with its caller's: %v, %v", ctx.Err(), child.Err())
		}
		for ctx.Err() == nil {
			time.Sleep(time.Microsecond)
			calls.Add(1) // keep the meter awake
		}
		if took := time.Since(began); took < timeout-tickLen || took > timeout+time.Microsecond {
			t.Errorf("the deadline ended %v after the call began, want within [%v, %v]", took, timeout-tickLen, timeout)
		}
		synctest.Wait()
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) || child.Err() == nil {
			t.Errorf("at the deadline: Err() = %v, derived %v; want context.DeadlineExceeded, and the derived ended", ctx.Err(), child.Err())
		}
		if !next.expired() {
			t.Errorf("the tick ended without having expired")
		}
	})
}

// TestInlineCallerDeadline checks that an inline call whose caller's
// context ends before the per-call deadline runs under the caller's own
// context, and is not counted when that ends.
func TestInlineCallerDeadline(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fake{}
		f.set(nil, true)
		b := newBreaker(t, f)
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := b.Apply(ctx, req("k"))
		if took := time.Since(start); took != time.Millisecond {
			t.Errorf("Apply took %v, want the caller's deadline, 1ms", took)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Apply error = %v, want the caller's context.DeadlineExceeded", err)
		}
		if c := b.Counts(); c.Failures != 0 || c.Excluded != 1 {
			t.Errorf("Counts() = %+v, want the call excluded", c)
		}
		if !b.steady(b.now()) {
			t.Errorf("a caller's own deadline made the store unsteady")
		}
	})
}

// TestTimedSample checks which answered calls are timed for the deadline
// to adapt to: every one while few calls are made, and a sample of them,
// at least minTimed between two adaptations, when many are.
func TestTimedSample(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fake{}
		f.set(nil, false)
		b := newBreaker(t, f)
		time.Sleep(DefaultWindow) // past the cold start, whose calls are not timed
		timed := func() uint64 {
			var n uint64
			for i := range b.deadlines.lat {
				n += b.deadlines.lat[i].Load()
			}
			return n
		}
		// run makes n calls in each of the next beats of the meter, and
		// returns how many of the calls made after two adaptations (the
		// first may have counted the calls before) were timed, and how
		// many calls that was.
		run := func(n int) (got, of uint64) {
			for beat := range 4 * adaptBeats {
				if beat == 2*adaptBeats {
					got, of = timed(), 0
				}
				for range n {
					if _, err := b.Apply(context.Background(), req("k")); err != nil {
						t.Fatal(err)
					}
				}
				of += uint64(n)
				time.Sleep(meterBeat)
			}
			return timed() - got, of
		}
		// The counts halve every decayAdapts adaptations: fewer than that
		// pass here.
		if got, of := run(4); got != of {
			t.Errorf("%d calls a beat: %d of %d calls timed, want every one", 4, got, of)
		}
		const many = 2000 // calls a beat
		got, of := run(many)
		if low, high := uint64(2*minTimed)*3/4, of/16; got < low || got > high {
			t.Errorf("%d calls a beat: %d of %d calls timed, want %d to %d: a sample, of about %d an adaptation", many, got, of, low, high, minTimed)
		}
		if got, of := run(4); got != of {
			t.Errorf("%d calls a beat, after %d: %d of %d calls timed, want every one", 4, many, got, of)
		}
	})
}
