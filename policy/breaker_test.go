package policy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redisfaults"
	"github.com/sluicehq/sluice/stores"
	"github.com/sluicehq/sluice/stores/memstore"

	"github.com/sluicehq/sluice/stores/redisstore"
)

// fake is a remote store whose answers a test sets: every request
// allowed, or err, optionally after waiting for the call's context to end.
// A batch is one call, answered as a whole.
type fake struct {
	mu      sync.Mutex
	err     error
	hang    bool         // wait until the context ends, then fail with its error
	calls   atomic.Int64 // calls of Apply and ApplyAll
	batches atomic.Int64 // calls of ApplyAll
	ended   atomic.Int64 // hanging calls whose context ended
	resets  atomic.Int64
	closes  atomic.Int64
}

var (
	_       core.Store = (*fake)(nil)
	refused            = &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
)

func (f *fake) set(err error, hang bool) {
	f.mu.Lock()
	f.err, f.hang = err, hang
	f.mu.Unlock()
}

func (f *fake) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	if err := req.Validate(); err != nil {
		return core.Decision{}, err // as every store does, before it acts
	}
	if err := f.call(ctx); err != nil {
		return core.Decision{}, err
	}
	return core.Decision{Allowed: true, Limit: req.Limit.Burst(), Remaining: 1}, nil
}

// ApplyAll answers the whole batch as one call: every request allowed,
// or the call's error.
func (f *fake) ApplyAll(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	if err := stores.ValidateAll(reqs, out); err != nil {
		return err
	}
	f.batches.Add(1)
	if err := f.call(ctx); err != nil {
		return err
	}
	for i := range reqs {
		out[i] = core.Decision{Allowed: true, Limit: reqs[i].Limit.Burst(), Remaining: 1}
	}
	return nil
}

// call counts a call and returns its error, if the test set one.
func (f *fake) call(ctx context.Context) error {
	f.calls.Add(1)
	f.mu.Lock()
	err, hang := f.err, f.hang
	f.mu.Unlock()
	if hang {
		<-ctx.Done()
		f.ended.Add(1)
		return fmt.Errorf("fake: %w", ctx.Err())
	}
	if err != nil {
		return fmt.Errorf("fake: %w", err)
	}
	return nil
}

func (f *fake) Reset(context.Context, string, core.Algorithm) error {
	f.resets.Add(1)
	return nil
}

func (f *fake) Close() error {
	f.closes.Add(1)
	return nil
}

func newBreaker(t testing.TB, remote core.Store, opts ...BreakerOption) *Breaker {
	t.Helper()
	b, err := NewBreaker(remote, append([]BreakerOption{withLocal(t)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// withLocal gives a breaker a memstore of its own for Degrade, as every
// breaker of newBreaker has, so that any view may degrade.
func withLocal(t testing.TB) BreakerOption {
	t.Helper()
	s, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return WithLocal(s)
}

// settled waits until b may trip: a tenth of its window after NewBreaker.
func settled(b *Breaker) *Breaker {
	time.Sleep(b.cfg.window/10 + time.Millisecond)
	return b
}

// sansAt returns d without its instant, which a decision made on the
// local clock has at a time a test cannot know.
func sansAt(d core.Decision) core.Decision {
	d.At = time.Time{}
	return d
}

func req(key string) core.Request {
	return core.Request{Key: key, Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerMinute(100)}}
}

func TestNewBreakerInvalid(t *testing.T) {
	t.Parallel()
	if _, err := NewBreaker(nil); !errors.Is(err, core.ErrNoStore) {
		t.Errorf("NewBreaker(nil) error = %v, want core.ErrNoStore", err)
	}
	tests := []struct {
		name string
		opt  BreakerOption
	}{
		{"timeout 0", WithTimeout(0)},
		{"timeout negative", WithTimeout(-time.Millisecond)},
		{"timeout huge", WithTimeout(time.Hour)},
		{"open timeout 0", WithOpenTimeout(0)},
		{"open timeout huge", WithOpenTimeout(48 * time.Hour)},
		{"probes 0", WithProbes(0)},
		{"probes huge", WithProbes(1 << 20)},
		{"min failures 0", WithTrip(0, 0.5)},
		{"min failures huge", WithTrip(math.MaxInt, 0.5)},
		{"ratio 0", WithTrip(5, 0)},
		{"ratio above 1", WithTrip(5, 1.5)},
		{"ratio NaN", WithTrip(5, math.NaN())},
		{"window tiny", WithWindow(time.Millisecond)},
		{"window huge", WithWindow(48 * time.Hour)},
		{"mode unknown", WithMode(Mode(9))},
		{"instances 0", WithInstances(0)},
		{"instances huge", WithInstances(1 << 30)},
		{"degrade without a local store", WithMode(Degrade)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := NewBreaker(&fake{}, tt.opt)
			if !errors.Is(err, ErrInvalidOption) || b != nil {
				t.Errorf("NewBreaker(%s) = %v, %v; want nil and an error wrapping ErrInvalidOption", tt.name, b, err)
			}
			t.Logf("%v", err)
		})
	}
	// A nil option is ignored, and the defaults hold.
	b := newBreaker(t, &fake{}, nil)
	if b.Name() != DefaultName || b.Mode() != FailOpen || b.State() != Closed {
		t.Errorf("defaults: name %q, mode %v, state %v", b.Name(), b.Mode(), b.State())
	}
	if _, err := b.WithMode(Mode(7)); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("WithMode(Mode(7)) error = %v, want ErrInvalidOption", err)
	}
}

func TestStrings(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ got, want string }{
		{FailOpen.String(), "fail-open"},
		{FailClosed.String(), "fail-closed"},
		{Degrade.String(), "degrade"},
		{Mode(9).String(), "Mode(9)"},
		{Closed.String(), "closed"},
		{HalfOpen.String(), "half-open"},
		{Open.String(), "open"},
		{State(5).String(), "State(5)"},
	} {
		if tt.got != tt.want {
			t.Errorf("String() = %q, want %q", tt.got, tt.want)
		}
	}
}

// TestModeAnswers checks each mode's answer to a call that failed while
// the circuit was closed, and to calls while it is open.
func TestModeAnswers(t *testing.T) {
	t.Parallel()
	f := &fake{}
	f.set(refused, false)
	b := settled(newBreaker(t, f, WithInstances(4), WithOpenTimeout(time.Hour)))
	views := map[Mode]core.Store{FailOpen: b}
	for _, m := range []Mode{FailClosed, Degrade} {
		v, err := b.WithMode(m)
		if err != nil {
			t.Fatal(err)
		}
		views[m] = v
	}
	ctx := context.Background()
	for round, state := range []State{Closed, Open} {
		if round == 1 {
			for range 10 { // trip it
				b.Apply(ctx, req("trip"))
			}
		}
		if got := b.State(); got != state {
			t.Fatalf("round %d: state %v, want %v", round, got, state)
		}
		d, err := views[FailOpen].Apply(ctx, req("k"))
		if err != nil || sansAt(d) != (core.Decision{Allowed: true, Source: core.SourceFailOpen}) || d.At.IsZero() {
			t.Errorf("%v: fail-open = %+v, %v", state, d, err)
		}
		d, err = views[FailClosed].Apply(ctx, req("k"))
		if err != nil || d.Allowed || d.Source != core.SourceFailClosed || d.RetryAfter <= 0 || d.Limit != 0 {
			t.Errorf("%v: fail-closed = %+v, %v; want a denial with a RetryAfter", state, d, err)
		}
		if state == Open && (d.RetryAfter <= 59*time.Minute || d.RetryAfter > time.Hour) {
			t.Errorf("open: fail-closed RetryAfter = %v, want the rest of the hour's open timeout", d.RetryAfter)
		}
		// Degrade: 100/min among 4 instances is 25 a minute, burst 25.
		key := "degrade-" + state.String()
		admitted := 0
		for i := range 30 {
			d, err := views[Degrade].Apply(ctx, req(key))
			if err != nil || d.Source != core.SourceDegraded {
				t.Fatalf("%v: degrade call %d = %+v, %v", state, i, d, err)
			}
			if d.Allowed {
				admitted++
				if d.Limit != 25 {
					t.Errorf("%v: degraded decision's Limit = %d, want 25", state, d.Limit)
				}
			}
		}
		if admitted != 25 {
			t.Errorf("%v: degrade admitted %d of 30, want 25", state, admitted)
		}
	}
}

func TestShare(t *testing.T) {
	t.Parallel()
	tests := []struct {
		limit core.Limit
		n     int64
		want  core.Limit
	}{
		{core.PerSecond(100), 1, core.PerSecond(100)},
		{core.PerSecond(100), 4, core.PerSecond(25)},
		{core.PerSecond(100), 3, core.PerSecond(33)},                           // rounded down
		{core.PerSecond(10).WithBurst(50), 4, core.PerSecond(2).WithBurst(12)}, // each part rounded down
		{core.PerSecond(10).WithBurst(2), 4, core.PerSecond(2).WithBurst(1)},   // burst at least 1
		{core.PerSecond(10), 50, core.Per(1, 5*time.Second)},                   // below one a second: 1 per ⌈50/10⌉ s
		{core.PerSecond(3), 4, core.Per(1, 2*time.Second)},                     // ⌈4/3⌉ = 2
		{core.PerMinute(1), 1000, core.Per(1, 1000*time.Minute)},
	}
	for _, tt := range tests {
		got, ok := share(tt.limit, tt.n)
		if !ok || got != tt.want {
			t.Errorf("share(%v, %d) = %v, %v; want %v", tt.limit, tt.n, got, ok, tt.want)
		}
		// n instances never admit more than the limit in the long run.
		if ok && float64(got.Rate())*float64(tt.n)/got.Period().Seconds() > float64(tt.limit.Rate())/tt.limit.Period().Seconds()+1e-9 {
			t.Errorf("share(%v, %d) = %v: %d of them exceed the limit's rate", tt.limit, tt.n, got, tt.n)
		}
	}
	// A share past the longest period is not expressible.
	if got, ok := share(core.Per(1, core.MaxPeriod/2), 3); ok {
		t.Errorf("share(1 per MaxPeriod/2, 3) = %v, true; want false", got)
	}
}

// TestDegradeInexpressible answers fail-closed when the share cannot be
// expressed.
func TestDegradeInexpressible(t *testing.T) {
	t.Parallel()
	f := &fake{}
	f.set(refused, false)
	b := newBreaker(t, f, WithMode(Degrade), WithInstances(3))
	r := req("k")
	r.Limit = core.Per(1, core.MaxPeriod/2)
	d, err := b.Apply(context.Background(), r)
	if err != nil || d.Allowed || d.Source != core.SourceFailClosed {
		t.Errorf("Apply = %+v, %v; want a fail-closed denial", d, err)
	}
}

// TestTripAndRecover walks the circuit through its states on a fake
// clock: it opens on the ratio of failures, makes no call while open,
// lets at most the probes through when half-open, and closes on their
// success; the changes arrive in order.
func TestTripAndRecover(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fake{}
		var changes []string
		var causes []error
		b := settled(newBreaker(t, f, WithOpenTimeout(time.Second), WithProbes(2),
			WithOnChange(func(c Change) {
				changes = append(changes, c.From.String()+">"+c.To.String())
				causes = append(causes, c.Cause)
			})))
		ctx := context.Background()
		apply := func() core.Decision {
			t.Helper()
			d, err := b.Apply(ctx, req("k"))
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			return d
		}
		// 10 successes, then failures: the ratio needs 10 failures (and at
		// least 5) to reach half.
		for range 10 {
			apply()
		}
		f.set(refused, false)
		for i := range 9 {
			if d := apply(); d.Source != core.SourceFailOpen {
				t.Fatalf("failure %d answered %+v", i, d)
			}
			if b.State() != Closed {
				t.Fatalf("opened after %d failures and 10 successes; want 10 failures", i+1)
			}
		}
		apply()
		if b.State() != Open {
			t.Fatalf("state %v after 10 failures and 10 successes, want open", b.State())
		}
		calls := f.calls.Load()
		for range 100 {
			apply()
			time.Sleep(5 * time.Millisecond)
		}
		if n := f.calls.Load() - calls; n != 0 {
			t.Errorf("%d calls reached the store while open, want 0", n)
		}
		// Half-open: a probe fails, the circuit opens again.
		time.Sleep(time.Second + time.Millisecond)
		apply()
		if b.State() != Open || f.calls.Load()-calls != 1 {
			t.Errorf("after a failed probe: state %v, %d calls; want open, 1", b.State(), f.calls.Load()-calls)
		}
		// Redis is back: 2 probes close it.
		f.set(nil, false)
		time.Sleep(time.Second + time.Millisecond)
		for i := range 2 {
			if d := apply(); d.Source != core.SourceStore {
				t.Fatalf("probe %d answered %+v", i, d)
			}
		}
		if b.State() != Closed {
			t.Errorf("state %v after 2 successful probes, want closed", b.State())
		}
		want := []string{"closed>open", "open>half-open", "half-open>open", "open>half-open", "half-open>closed"}
		if !slices.Equal(changes, want) {
			t.Errorf("changes %v, want %v", changes, want)
		}
		// A change to open carries the failure that made it; no other does.
		for i, c := range causes {
			if open := strings.HasSuffix(changes[i], ">open"); open != errors.Is(c, refused) || !open && c != nil {
				t.Errorf("change %s: cause %v, want %v for a change to open and nil for others", changes[i], c, refused)
			}
		}
		if n := b.BreakerChanges(); n != uint64(len(want)) {
			t.Errorf("BreakerChanges() = %d, want %d", n, len(want))
		}
		st := b.Stats()
		if st.Failures != 11 || st.Changes != 5 || st.Rejected != 100 {
			t.Errorf("Stats() = %+v; want 11 failures, 5 changes, 100 rejected", st)
		}
	})
}

// TestFastPath checks that a closed circuit with nothing failing counts
// its successes without gobreaker, in the breaker's own window
// (TestTripAndRecover checks the trip rule's ratio); that a failure sends
// the calls through gobreaker until it has counted a success, which the
// window counts too; and that the window forgets its outcomes once it has
// passed them.
func TestFastPath(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fake{}
		b := settled(newBreaker(t, f))
		ctx := context.Background()
		apply := func(want core.Source) {
			t.Helper()
			if d, err := b.Apply(ctx, req("k")); err != nil || d.Source != want {
				t.Fatalf("Apply = %+v, %v; want source %v", d, err, want)
			}
		}
		for range 10 {
			apply(core.SourceStore)
		}
		if n := b.cb.Counts().Requests; n != 0 {
			t.Errorf("gobreaker counted %d calls of a closed circuit with nothing failing, want 0", n)
		}
		if c := b.Counts(); c != (Counts{Successes: 10}) {
			t.Errorf("Counts() = %+v; want 10 successes", c)
		}
		f.set(refused, false)
		apply(core.SourceFailOpen)
		f.set(nil, false)
		// A refused connection has calls run detached for a window (see
		// steady), through gobreaker; then the first success too.
		time.Sleep(b.cfg.window)
		apply(core.SourceStore)
		counted := b.cb.Counts()
		apply(core.SourceStore) // the fast path again
		if n := b.cb.Counts().Requests; n != counted.Requests || counted.TotalSuccesses != 1 {
			t.Errorf("gobreaker counted %d calls (%d successes), then %d; want the success after the failure, then no more", counted.Requests, counted.TotalSuccesses, n)
		}
		// The window has passed the first ten successes and the failure.
		if c := b.Counts(); c != (Counts{Successes: 2}) {
			t.Errorf("Counts() = %+v; want the success through gobreaker and the fast path's 1", c)
		}
		time.Sleep(b.cfg.window + b.cfg.window/10)
		if c := b.Counts(); c != (Counts{}) {
			t.Errorf("Counts() = %+v a window later, want none", c)
		}
	})
}

// TestFastPathAllocs checks that a decision on the fast path allocates
// no more than its share of a slab of calls' contexts (see
// newCallContext): a context each would be one allocation a decision.
// Under the race detector the pool drops a slab now and then, so that a
// slab serves four calls on average. (Not parallel: AllocsPerRun counts
// every goroutine's allocations.)
func TestFastPathAllocs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := settled(newBreaker(t, &fake{}))
		ctx, r := context.Background(), req("k")
		if n := testing.AllocsPerRun(1000, func() { b.Apply(ctx, r) }); n > 0.5 {
			t.Errorf("a decision on the fast path costs %v allocations, want at most 0.5", n)
		}
	})
}

// TestHalfOpenProbes checks that the half-open circuit lets only its
// probes through, while they are under way.
func TestHalfOpenProbes(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fake{}
		f.set(refused, false)
		b := settled(newBreaker(t, f, WithProbes(3), WithTimeout(50*time.Millisecond), WithMode(FailClosed)))
		ctx := context.Background()
		for range 5 {
			b.Apply(ctx, req("k"))
		}
		if b.State() != Open {
			t.Fatalf("state %v, want open", b.State())
		}
		time.Sleep(DefaultOpenTimeout + time.Millisecond)
		// Probes that hang until the deadline: 3 get through; the other
		// 20 callers are answered at once.
		f.set(nil, true)
		calls := f.calls.Load()
		var wg sync.WaitGroup
		var quick atomic.Int64
		for range 23 {
			wg.Go(func() {
				start := time.Now()
				d, err := b.Apply(ctx, req("k"))
				if err != nil || d.Source != core.SourceFailClosed {
					t.Errorf("Apply = %+v, %v; want fail-closed", d, err)
				}
				if time.Since(start) == 0 {
					quick.Add(1)
				}
			})
		}
		wg.Wait()
		if n := f.calls.Load() - calls; n != 3 {
			t.Errorf("%d calls reached the store while half-open, want the 3 probes", n)
		}
		if quick.Load() != 20 {
			t.Errorf("%d callers answered at once, want 20", quick.Load())
		}
		if b.State() != Open {
			t.Errorf("state %v after the probes timed out, want open", b.State())
		}
		time.Sleep(callGrace * 50 * time.Millisecond) // the probes' detached calls end
	})
}

// TestPerCallDeadline checks that a store that does not answer costs a
// call the per-call deadline, counts as a failure, and has its call's
// context end at the deadline.
func TestPerCallDeadline(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fake{}
		f.set(nil, true)
		b := settled(newBreaker(t, f, WithTimeout(7*time.Millisecond), WithMode(FailClosed)))
		start := time.Now()
		d, err := b.Apply(context.Background(), req("k"))
		if took := time.Since(start); took != 7*time.Millisecond {
			t.Errorf("Apply took %v, want the deadline, 7ms", took)
		}
		if err != nil || d.Source != core.SourceFailClosed {
			t.Errorf("Apply = %+v, %v; want fail-closed", d, err)
		}
		if c := b.Counts(); c.Failures != 1 {
			t.Errorf("Counts() = %+v, want 1 failure", c)
		}
		if n := f.ended.Load(); n != 1 {
			t.Errorf("%d calls' contexts ended by the deadline, want 1", n)
		}
	})
}

// TestNotCounted checks the errors that never count: each is returned to
// the caller, and a thousand of them leave the circuit closed with no
// failure counted.
func TestNotCounted(t *testing.T) {
	t.Parallel()
	background := func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name  string
		ctx   func() (context.Context, context.CancelFunc)
		err   error // the store's
		hang  bool
		req   core.Request
		want  error // the caller's error wraps it
		calls bool  // the store is called
	}{
		{"cancelled before", func() (context.Context, context.CancelFunc) { return cancelled, func() {} },
			nil, false, req("k"), context.Canceled, false},
		{"cancelled during", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(time.Millisecond, cancel)
			return ctx, cancel
		}, nil, true, req("k"), context.Canceled, true},
		{"caller's deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Millisecond)
		}, nil, true, req("k"), context.DeadlineExceeded, true},
		{"caller's deadline, client's timeout error", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Microsecond)
			time.Sleep(time.Millisecond)
			return ctx, cancel
		}, os.ErrDeadlineExceeded, false, req("k"), context.DeadlineExceeded, false}, // called only if the context's timer is late
		{"invalid key", background, nil, false, req(""), core.ErrInvalidKey, false},
		{"invalid cost", background, nil, false, core.Request{Key: "k", Cost: -1, Terms: &core.Terms{Algorithm: algorithms.GCRA, Limit: core.PerSecond(1)}}, core.ErrInvalidCost, false},
		{"no algorithm", background, nil, false, core.Request{Key: "k", Cost: 1, Terms: &core.Terms{Limit: core.PerSecond(1)}}, core.ErrNoAlgorithm, false},
		{"unsupported", background, core.ErrUnsupported, false, req("k"), core.ErrUnsupported, true},
		{"malformed", background, redisstore.ErrMalformed, false, req("k"), redisstore.ErrMalformed, true},
		{"WRONGTYPE", background, errors.New("WRONGTYPE Operation against a key holding the wrong kind of value"), false, req("k"), nil, true},
		{"BUSYKEY is not BUSY", background, errors.New("BUSYKEY Target key name already exists."), false, req("k"), nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &fake{}
			f.set(tt.err, tt.hang)
			b := newBreaker(t, f, WithTrip(1, 0.01), WithTimeout(50*time.Millisecond))
			for i := range 1000 {
				ctx, cancel := tt.ctx()
				d, err := b.Apply(ctx, tt.req)
				cancel()
				if err == nil || d != (core.Decision{}) {
					t.Fatalf("call %d: Apply = %+v, %v; want an error", i, d, err)
				}
				if tt.want != nil && !errors.Is(err, tt.want) {
					t.Fatalf("call %d: error %v does not wrap %v", i, err, tt.want)
				}
				if i == 0 {
					t.Logf("error: %v", err)
				}
				if tt.hang && i == 10 {
					break // slow ones: enough
				}
			}
			if (f.calls.Load() > 0) != tt.calls && !strings.HasPrefix(tt.name, "caller's deadline, client's") {
				t.Errorf("%d calls to the store", f.calls.Load())
			}
			if b.State() != Closed || b.Stats().Failures != 0 || b.Counts().Failures != 0 {
				t.Errorf("state %v, stats %+v, counts %+v; want closed, no failure", b.State(), b.Stats(), b.Counts())
			}
		})
	}
}

// TestDenialIsSuccess checks that denials count as successes.
func TestDenialIsSuccess(t *testing.T) {
	t.Parallel()
	denied := stores.Func(func(context.Context, core.Request) (core.Decision, error) {
		return core.Decision{Allowed: false, RetryAfter: time.Second}, nil
	})
	b := newBreaker(t, denied, WithTrip(1, 0.01))
	for range 100 {
		d, err := b.Apply(context.Background(), req("k"))
		if err != nil || d.Allowed || d.Source != core.SourceStore {
			t.Fatalf("Apply = %+v, %v; want the store's denial", d, err)
		}
	}
	if c := b.Counts(); c.Successes != 100 || b.State() != Closed {
		t.Errorf("counts %+v, state %v; want 100 successes, closed", c, b.State())
	}
}

// TestInf answers requests under core.Inf without the store, whatever the
// mode.
func TestInf(t *testing.T) {
	t.Parallel()
	f := &fake{}
	f.set(refused, false)
	b := newBreaker(t, f, WithMode(FailClosed))
	r := req("k")
	r.Limit = core.Inf
	if d, err := b.Apply(context.Background(), r); err != nil || sansAt(d) != core.Unlimited() || d.At.IsZero() || f.calls.Load() != 0 {
		t.Errorf("Apply(Inf) = %+v, %v with %d calls; want core.Unlimited() and none", d, err, f.calls.Load())
	}
}

// TestHookReentrant calls the breaker from its own hook, and blocks the
// hook, while other callers go on.
func TestHookReentrant(t *testing.T) {
	t.Parallel()
	f := &fake{}
	f.set(refused, false)
	release := make(chan struct{})
	entered := make(chan struct{})
	var b *Breaker
	var seen []Change
	b = newBreaker(t, f, WithTrip(1, 0.01), WithOpenTimeout(time.Hour), WithOnChange(func(c Change) {
		seen = append(seen, c)
		// Calls from the hook neither deadlock nor deliver.
		d, err := b.Apply(context.Background(), req("from-hook"))
		if err != nil || d.Source != core.SourceFailOpen || b.State() != Open || b.BreakerState() != "open" {
			t.Errorf("in the hook: Apply = %+v, %v, state %v", d, err, b.State())
		}
		close(entered)
		<-release
	}))
	settled(b)
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.Apply(context.Background(), req("k")) // trips, and delivers
	}()
	<-entered
	// The hook blocks its caller only: the others are answered.
	for range 100 {
		if d, err := b.Apply(context.Background(), req("k")); err != nil || d.Source != core.SourceFailOpen {
			t.Fatalf("Apply while the hook blocks = %+v, %v", d, err)
		}
	}
	close(release)
	<-done
	if len(seen) != 1 || seen[0].From != Closed || seen[0].To != Open || seen[0].Name != DefaultName || seen[0].At.IsZero() {
		t.Errorf("hook saw %+v, want one change from closed to open", seen)
	}
}

// TestHookBlocksOnlyItsCaller blocks the hook on the change to closed,
// after it called State, and decides 1,000 calls meanwhile: the store
// answers each (the circuit is closed), and none waits for the hook
//
func TestHookBlocksOnlyItsCaller(t *testing.T) {
	t.Parallel()
	f := &fake{}
	release := make(chan struct{})
	entered := make(chan struct{})
	var b *Breaker
	b = newBreaker(t, f, WithTrip(1, 0.01), WithOpenTimeout(time.Millisecond), WithProbes(1), WithOnChange(func(c Change) {
		if c.To != Closed {
			return
		}
		if s := b.State(); s != Closed {
			t.Errorf("State() in the hook of the change to closed = %v", s)
		}
		close(entered)
		<-release
	}))
	settled(b)
	timed := func(n int) []time.Duration {
		lat := make([]time.Duration, n)
		for i := range lat {
			start := time.Now()
			d, err := b.Apply(context.Background(), req("k"))
			lat[i] = time.Since(start)
			if err != nil || d.Source != core.SourceStore {
				t.Fatalf("call %d: Apply = %+v, %v; want the store's decision", i, d, err)
			}
		}
		slices.Sort(lat)
		return lat
	}
	canary := redisfaults.StartCanary()
	before := timed(1000)
	f.set(refused, false)
	for i := 0; b.State() != Open; i++ { // 1% of the window's calls trip it
		if i == 1000 {
			t.Fatalf("state %v after %d refused calls, want open", b.State(), i)
		}
		b.Apply(context.Background(), req("k"))
	}
	f.set(nil, false)
	time.Sleep(2 * time.Millisecond) // the open timeout
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.Apply(context.Background(), req("k")) // the probe: closes, and delivers
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatalf("the hook was not called; state %v", b.State())
	}
	// The hook blocks until release: a call that waited for it would
	// never return, and timed would not either.
	during := timed(1000)
	close(release)
	<-done
	stall := canary.Stop()
	// the other callers' p99 stays within 1 ms of what it was
	// before the hook, and of the longest stall of the process itself,
	// which any call may have sat through (the canary sees 1 to 8 ms
	// here, under the race detector as much as without: a sleeping
	// process wakes late on this machine). Stalls delay the calls they
	// catch, a few of 1,000 that take tens of µs each, so the median
	// has no such allowance: a call that waited for the hook would move
	// it.
	at := func(lat []time.Duration, q int) time.Duration { return lat[len(lat)*q/100] }
	t.Logf("p50 %v, p99 %v before the hook; p50 %v, p99 %v while it blocked; the canary's longest stall %v",
		at(before, 50), at(before, 99), at(during, 50), at(during, 99), stall)
	if bound := at(before, 99) + time.Millisecond; at(during, 50) > bound {
		t.Errorf("median of the other callers %v while the hook blocked: want at most %v (1 ms over the p99 before it)", at(during, 50), bound)
	}
	if bound := at(before, 99) + time.Millisecond + stall; at(during, 99) > bound {
		t.Errorf("p99 of the other callers %v while the hook blocked, %v before it: want at most %v (1 ms more, and the canary's longest stall, %v)", at(during, 99), at(before, 99), bound, stall)
	}
}

// TestHookOrderConcurrent checks that concurrent callers deliver every
// change once, in order.
func TestHookOrderConcurrent(t *testing.T) {
	t.Parallel()
	f := &fake{}
	var mu sync.Mutex
	var seen []Change
	b := newBreaker(t, f, WithTrip(1, 0.01), WithOpenTimeout(time.Millisecond), WithProbes(1),
		WithOnChange(func(c Change) {
			mu.Lock()
			seen = append(seen, c)
			mu.Unlock()
		}))
	settled(b)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 2000 {
				if (g+i)%7 == 0 {
					f.set(refused, false)
				} else if (g+i)%5 == 0 {
					f.set(nil, false)
				}
				if _, err := b.Apply(context.Background(), req("k")); err != nil {
					t.Errorf("Apply: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.Apply(context.Background(), req("k")) // delivers the last
	mu.Lock()
	defer mu.Unlock()
	if uint64(len(seen)) != b.BreakerChanges() {
		t.Errorf("hook saw %d changes, BreakerChanges() = %d", len(seen), b.BreakerChanges())
	}
	for i := 1; i < len(seen); i++ {
		if seen[i].From != seen[i-1].To || seen[i].At.Before(seen[i-1].At) {
			t.Fatalf("change %d (%v→%v) does not follow change %d (%v→%v)", i, seen[i].From, seen[i].To, i-1, seen[i-1].From, seen[i-1].To)
		}
	}
	t.Logf("%d changes, %+v", len(seen), b.Stats())
}

// TestDegradeKeepsLocalState checks that what an instance admitted on its
// own in one outage still counts in the next, within the limit's period:
// a circuit that closes and opens again does not hand out a fresh share
// each time.
func TestDegradeKeepsLocalState(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fake{}
		b := settled(newBreaker(t, f, WithMode(Degrade), WithInstances(2), WithProbes(1)))
		ctx := context.Background()
		admitted := func() int {
			n := 0
			for range 60 {
				d, err := b.Apply(ctx, req("k"))
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed && d.Source == core.SourceDegraded {
					n++
				}
			}
			return n
		}
		// 100 a minute between 2 instances: 50 a minute, burst 50.
		f.set(refused, false)
		if n := admitted(); n != 50 {
			t.Errorf("first outage: %d admitted locally, want the share, 50", n)
		}
		f.set(nil, false)
		time.Sleep(DefaultOpenTimeout + time.Millisecond)
		b.Apply(ctx, req("k"))
		time.Sleep(DefaultWindow / 10) // it does not trip again at once
		if b.State() != Closed {
			t.Fatalf("after the first outage: %v, want closed", b.State())
		}
		// 1.1 s later the share has refilled by less than one.
		f.set(refused, false)
		if n := admitted(); n != 0 {
			t.Errorf("second outage, 1.1 s later: %d admitted locally, want 0: the first outage's admissions count", n)
		}
	})
}

func TestCloseResetUnwrap(t *testing.T) {
	t.Parallel()
	f := &fake{}
	f.set(refused, false)
	local, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewBreaker(f, WithMode(Degrade), WithLocal(local))
	if err != nil {
		t.Fatal(err)
	}
	v, err := b.WithMode(FailOpen)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	b.Apply(ctx, req("k")) // decided on the local store
	if b.Unwrap() != core.Store(f) || v.Unwrap() != core.Store(b) || v.Breaker() != b || v.Mode() != FailOpen {
		t.Errorf("Unwrap: breaker %v, view %v", b.Unwrap(), v.Unwrap())
	}
	if err := v.Reset(ctx, "k", algorithms.TokenBucket); err != nil || f.resets.Load() != 1 {
		t.Errorf("Reset = %v with %d resets, want nil and 1", err, f.resets.Load())
	}
	if err := b.Reset(ctx, "", algorithms.TokenBucket); !errors.Is(err, core.ErrInvalidKey) {
		t.Errorf("Reset(\"\") = %v, want core.ErrInvalidKey", err)
	}
	for range 2 {
		if err := b.Close(); err != nil {
			t.Errorf("Close = %v", err)
		}
	}
	if f.closes.Load() != 1 {
		t.Errorf("remote closed %d times, want once", f.closes.Load())
	}
	if _, err := local.Apply(ctx, req("k")); !errors.Is(err, core.ErrClosed) {
		t.Errorf("the local store after Close: %v, want core.ErrClosed", err)
	}
	for name, s := range map[string]core.Store{"breaker": b, "view": v} {
		if _, err := s.Apply(ctx, req("k")); !errors.Is(err, core.ErrClosed) {
			t.Errorf("%s: Apply after Close = %v, want core.ErrClosed", name, err)
		}
		if err := s.Reset(ctx, "k", algorithms.TokenBucket); !errors.Is(err, core.ErrClosed) {
			t.Errorf("%s: Reset after Close = %v, want core.ErrClosed", name, err)
		}
	}

	// A remote store that cannot reset.
	plain := newBreaker(t, stores.Func(f.Apply))
	if err := plain.Reset(ctx, "k", algorithms.TokenBucket); !errors.Is(err, core.ErrUnsupported) {
		t.Errorf("Reset over a store without Reset = %v, want core.ErrUnsupported", err)
	}
}

// TestBreakerConcurrentSafe hammers one breaker and its views from many
// goroutines while the store fails and recovers.
func TestBreakerConcurrentSafe(t *testing.T) {
	t.Parallel()
	f := &fake{}
	b := settled(newBreaker(t, f, WithMode(Degrade), WithInstances(3), WithOpenTimeout(2*time.Millisecond), WithProbes(2)))
	closed, _ := b.WithMode(FailClosed)
	open, _ := b.WithMode(FailOpen)
	stores := []core.Store{b, closed, open}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			if i%2 == 0 {
				f.set(refused, false)
			} else {
				f.set(nil, false)
			}
		}
	})
	for g := range 32 {
		wg.Go(func() {
			for i := range 3000 {
				r := req(fmt.Sprint("k", i%10))
				if i%13 == 0 {
					r.Op = core.OpPeek
				}
				if _, err := stores[(g+i)%3].Apply(context.Background(), r); err != nil {
					t.Errorf("Apply: %v", err)
					return
				}
				if i%500 == 0 {
					_ = b.State()
					_ = b.Counts()
				}
			}
		})
	}
	time.Sleep(10 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("%+v", b.Stats())
}

// TestSlowStart checks what follows a recovery: the calls in flight to the
// store are capped, from the probes' number up by one per answer, the
// others getting the mode's answer; and failures do not trip the circuit
// within a tenth of the window, but do after it.
func TestSlowStart(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := &fake{}
		f.set(refused, false)
		b := settled(newBreaker(t, f, WithProbes(2), WithTimeout(10*time.Millisecond), WithMode(FailClosed)))
		ctx := context.Background()
		for range 5 {
			b.Apply(ctx, req("k"))
		}
		time.Sleep(DefaultOpenTimeout + time.Millisecond)
		f.set(nil, false)
		for range 2 {
			b.Apply(ctx, req("k"))
		}
		// The closing probe's answer counts: 2, then 3.
		if b.State() != Closed || b.ramp.Load() != 3 {
			t.Fatalf("state %v, cap %d after 2 probes; want closed, 3", b.State(), b.ramp.Load())
		}
		// 10 callers at once on a store that hangs: 3 get through.
		f.set(nil, true)
		calls := f.calls.Load()
		var wg sync.WaitGroup
		for range 10 {
			wg.Go(func() { b.Apply(ctx, req("k")) })
		}
		wg.Wait()
		if n := f.calls.Load() - calls; n != 3 {
			t.Errorf("%d calls reached the store during the slow start with a cap of 3, want 3", n)
		}
		// Those were failures, within a tenth of the window: still closed.
		if b.State() != Closed {
			t.Errorf("state %v after failures within the settling time, want closed", b.State())
		}
		// Answers raise the cap, one each.
		f.set(nil, false)
		for range 5 {
			b.Apply(ctx, req("k"))
		}
		if c := b.ramp.Load(); c != 8 {
			t.Errorf("cap %d after 5 answers from 3, want 8", c)
		}
		// A window after closing, the slow start is over, and failures
		// trip the circuit again.
		time.Sleep(DefaultWindow)
		f.set(nil, true)
		calls = f.calls.Load()
		for range 10 {
			wg.Go(func() { b.Apply(ctx, req("k")) })
		}
		wg.Wait()
		if n := f.calls.Load() - calls; n != 10 {
			t.Errorf("a window after closing, %d of 10 callers at once reached the store, want all", n)
		}
		f.set(refused, false)
		for range 20 {
			b.Apply(ctx, req("k"))
		}
		if b.State() != Open {
			t.Errorf("a window after closing: state %v after 30 failures, want open", b.State())
		}
		time.Sleep(time.Second) // the hanging calls end
	})
}
