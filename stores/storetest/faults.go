package storetest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core"
)

// ErrOutage is an error for [Faulty.FailNext] and [Faulty.Fail] that
// reads as the store's outage: it wraps [core.ErrUnavailable], so package
// policy's IsStoreFailure reports it as the store's failure, and a
// breaker counts it and answers the call by its mode (fail-open,
// fail-closed, degrade), as it would Redis answering LOADING or
// READONLY. An error that does not wrap core.ErrUnavailable (nor a
// timeout or a broken connection) is the request's own: a breaker hands
// it to its caller and does not count it.
var ErrOutage = fmt.Errorf("storetest: injected outage: %w", core.ErrUnavailable)

// Faulty is a store decorator for tests that injects faults into the
// calls it forwards to the store it wraps, and records every call:
//
//	f := storetest.NewFaulty(inner)
//	f.FailNext(3, storetest.ErrOutage)  // the next 3 calls fail
//	f.SetLatency(50 * time.Millisecond) // every call is 50 ms slower
//	release := f.Blackhole()            // calls hang until release()
//	f.Requests()                        // every request, batches included
//
// A call of Apply, ApplyAll or Reset goes through the faults in turn, as
// a request goes through a network to a server:
//
//  1. the blackhole, while one is open ([Faulty.Blackhole]): the call
//     waits until it is released, its context ends (it then fails with
//     the context's error, as a client's timeout does) or the Faulty is
//     closed;
//  2. the latency ([Faulty.SetLatency]): the call waits that long, or
//     until its context ends;
//  3. a failure, if one is due ([Faulty.FailNext], [Faulty.Fail]): the
//     call returns it without reaching the wrapped store, with the zero
//     decision (an ApplyAll's out is zeroed);
//  4. otherwise the call is forwarded, and the store's answer returned.
//
// Faults apply to the calls that reach each step after they are set, and
// [Faulty.Heal] ends them all. Without faults a Faulty forwards every call
// unchanged, so it passes the conformance suite ([Run]) as the store it
// wraps does.
//
// A Faulty is safe for concurrent use, and starts no goroutine: waits
// happen on the callers' goroutines. Its waits use the time package, so
// inside a testing/synctest bubble latency takes no real time, and a call
// waiting in a blackhole or a latency is durably blocked; create the
// Faulty inside the bubble that uses it. It keeps every call it records
// for as long as it lives: keep it out of benchmarks and long load tests.
type Faulty struct {
	inner core.Store

	mu       sync.Mutex
	failN    int   // calls left to fail with failNext
	failNext error // the error of FailNext
	fail     error // the error of Fail, after failN runs out; nil if none
	latency  time.Duration
	hole     chan struct{} // open blackhole, closed by its release; nil if none
	held     int           // calls waiting in the blackhole
	calls    []Call
	closed   bool
	closeErr error
}

var _ core.Store = (*Faulty)(nil)

// NewFaulty returns a Faulty in front of inner, without faults. Made
// without a store (inner nil), every call it forwards fails with
// [core.ErrNoStore].
func NewFaulty(inner core.Store) *Faulty {
	if inner == nil {
		inner = noStore{}
	}
	return &Faulty{inner: inner}
}

// noStore is a Faulty's store when it was given none.
type noStore struct{}

func (noStore) Apply(context.Context, core.Request) (core.Decision, error) {
	return core.Decision{}, core.ErrNoStore
}

func (noStore) ApplyAll(context.Context, []core.Request, []core.Decision) error {
	return core.ErrNoStore
}

func (noStore) Reset(context.Context, string, core.Algorithm) error { return core.ErrNoStore }

func (noStore) Close() error { return nil }

// Call is a call a [Faulty] recorded.
type Call struct {
	// Method is "Apply", "ApplyAll" or "Reset".
	Method string
	// Requests holds an Apply's request, a copy of an ApplyAll's batch, or
	// for a Reset a request with only Key and Algorithm set.
	Requests []core.Request
	// Done reports whether the call had returned when it was read; the
	// fields below are set once it has.
	Done bool
	// Forwarded reports whether the call reached the wrapped store: false
	// for a call that failed by a fault, or whose context ended while it
	// waited, or that came after Close.
	Forwarded bool
	// Decisions holds what the call returned: an Apply's decision, or a
	// copy of an ApplyAll's out. Nil for a Reset and for a failed call.
	Decisions []core.Decision
	// Err is the error the call returned: an injected one as it was
	// given, one wrapping the context's error or [core.ErrClosed], or the
	// wrapped store's.
	Err error
}

// FailNext makes the next n calls that get past the blackhole and the
// latency fail with err, without reaching the wrapped store. It replaces
// what is left of an earlier FailNext; n ≤ 0 cancels it. A nil err is
// [ErrOutage]. Use ErrOutage, or an error wrapping [core.ErrUnavailable],
// for a failure a breaker counts.
func (f *Faulty) FailNext(n int, err error) {
	n = max(n, 0)
	if err == nil {
		err = ErrOutage
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failN, f.failNext = n, err
}

// Fail makes every call that gets past the blackhole and the latency fail
// with err, without reaching the wrapped store, once any calls left to
// [Faulty.FailNext] have failed: an outage that lasts until Fail(nil) or
// [Faulty.Heal]. Use [ErrOutage], or an error wrapping
// [core.ErrUnavailable], for a failure a breaker counts.
func (f *Faulty) Fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = err
}

// SetLatency makes every call wait d before it fails or is forwarded, as
// if the store were d farther away; a call whose context ends first fails
// with an error wrapping the context's, without reaching the store. Zero
// removes the latency. It applies to calls that reach the latency after
// it is set. A negative d is no latency, as zero is.
func (f *Faulty) SetLatency(d time.Duration) {
	d = max(d, 0)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.latency = d
}

// Blackhole opens a blackhole: every call from now on waits, as if the
// store had stopped answering, until release is called, the call's
// context ends (the call then fails with an error wrapping the context's:
// a client's timeout) or the Faulty is closed (the call fails with
// [core.ErrClosed]). Released calls go on through the latency and
// failures in force then. Calling Blackhole while a blackhole is open
// returns a release of the same one. release may be called more than
// once; [Faulty.Heal] releases too.
func (f *Faulty) Blackhole() (release func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hole == nil {
		f.hole = make(chan struct{})
	}
	hole := f.hole
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.hole == hole {
			close(hole)
			f.hole = nil
		}
	}
}

// Held returns how many calls are waiting in the blackhole now. A test
// without testing/synctest can poll it to know that the calls it started
// have arrived; inside a bubble, synctest.Wait does that.
func (f *Faulty) Held() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.held
}

// Heal ends every fault: calls left to [Faulty.FailNext], [Faulty.Fail]'s
// outage and the latency, and releases the blackhole. Calls already
// waiting out a latency finish their wait.
func (f *Faulty) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failN, f.failNext, f.fail, f.latency = 0, nil, nil, 0
	if f.hole != nil {
		close(f.hole)
		f.hole = nil
	}
}

// Calls returns every call recorded so far, in the order they arrived,
// including the calls still under way (Done false). The result is a copy.
func (f *Faulty) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	calls := make([]Call, len(f.calls))
	for i, c := range f.calls {
		c.Requests = append([]core.Request(nil), c.Requests...)
		if c.Decisions != nil {
			c.Decisions = append([]core.Decision(nil), c.Decisions...)
		}
		calls[i] = c
	}
	return calls
}

// Requests returns the requests of every Apply and ApplyAll call
// recorded so far, a batch's in its order, whether the calls succeeded,
// failed or are still under way: what the code under test asked of the
// store. [Faulty.Calls] tells the calls apart.
func (f *Faulty) Requests() []core.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	var reqs []core.Request
	for _, c := range f.calls {
		if c.Method != "Reset" {
			reqs = append(reqs, c.Requests...)
		}
	}
	return reqs
}

// Apply records the call, applies the faults and forwards it.
func (f *Faulty) Apply(ctx context.Context, req core.Request) (core.Decision, error) {
	i := f.record("Apply", []core.Request{req})
	if err := f.pass(ctx); err != nil {
		f.done(i, false, nil, err)
		return core.Decision{}, err
	}
	d, err := f.inner.Apply(ctx, req)
	if err != nil {
		f.done(i, true, nil, err)
	} else {
		f.done(i, true, []core.Decision{d}, nil)
	}
	return d, err
}

// ApplyAll records the batch as one call, applies the faults and
// forwards it; a failure it injects zeroes out.
func (f *Faulty) ApplyAll(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	i := f.record("ApplyAll", append([]core.Request(nil), reqs...))
	if err := f.pass(ctx); err != nil {
		clear(out)
		f.done(i, false, nil, err)
		return err
	}
	err := f.inner.ApplyAll(ctx, reqs, out)
	if err != nil {
		f.done(i, true, nil, err)
	} else {
		f.done(i, true, append([]core.Decision(nil), out...), nil)
	}
	return err
}

// Reset records the call, applies the faults and forwards it.
func (f *Faulty) Reset(ctx context.Context, key string, alg core.Algorithm) error {
	i := f.record("Reset", []core.Request{{Key: key, Terms: &core.Terms{Algorithm: alg}}})
	if err := f.pass(ctx); err != nil {
		f.done(i, false, nil, err)
		return err
	}
	err := f.inner.Reset(ctx, key, alg)
	f.done(i, true, nil, err)
	return err
}

// Close closes the wrapped store, once, and returns its error, then and
// on every later Close. Calls waiting in the blackhole fail with
// [core.ErrClosed], as do later calls, without reaching the store.
func (f *Faulty) Close() error {
	f.mu.Lock()
	if f.closed {
		defer f.mu.Unlock()
		return f.closeErr
	}
	f.closed = true
	if f.hole != nil {
		close(f.hole)
		f.hole = nil
	}
	f.mu.Unlock()
	err := f.inner.Close()
	f.mu.Lock()
	f.closeErr = err
	f.mu.Unlock()
	return err
}

// Unwrap returns the wrapped store.
func (f *Faulty) Unwrap() core.Store { return f.inner }

// errClosed is the error of a call to a closed Faulty.
var errClosed = fmt.Errorf("storetest: faulty store: %w", core.ErrClosed)

// record records a call as it arrives and returns its index.
func (f *Faulty) record(method string, reqs []core.Request) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, Call{Method: method, Requests: reqs})
	return len(f.calls) - 1
}

// done records how call i ended.
func (f *Faulty) done(i int, forwarded bool, ds []core.Decision, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := &f.calls[i]
	c.Done, c.Forwarded, c.Decisions, c.Err = true, forwarded, ds, err
}

// pass takes a call through the blackhole, the latency and the failures,
// and returns nil if it is to be forwarded.
func (f *Faulty) pass(ctx context.Context) error {
	f.mu.Lock()
	for f.hole != nil && !f.closed {
		hole := f.hole
		f.held++
		f.mu.Unlock()
		var ended bool
		select {
		case <-hole:
		case <-ctx.Done():
			ended = true
		}
		f.mu.Lock()
		f.held--
		if ended {
			f.mu.Unlock()
			return fmt.Errorf("storetest: blackholed: %w", ctx.Err())
		}
	}
	if f.closed {
		f.mu.Unlock()
		return errClosed
	}
	latency := f.latency
	f.mu.Unlock()
	if latency > 0 {
		t := time.NewTimer(latency)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("storetest: latency %v: %w", latency, ctx.Err())
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.closed:
		return errClosed
	case f.failN > 0:
		f.failN--
		return f.failNext
	default:
		return f.fail
	}
}
