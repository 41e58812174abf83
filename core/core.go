package core

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Sentinel errors. Stores and decorators wrap them with %w; test with
// [errors.Is].
var (
	// ErrInvalidLimit reports a limit that cannot be decided with.
	ErrInvalidLimit = errors.New("sluice: invalid limit")
	// ErrInvalidCost reports a negative cost or one above [MaxUnits].
	ErrInvalidCost = errors.New("sluice: invalid cost")
	// ErrInvalidKey reports an empty key or one longer than [MaxKeyLen].
	ErrInvalidKey = errors.New("sluice: invalid key")
	// ErrNoAlgorithm reports a request or limiter without an algorithm.
	ErrNoAlgorithm = errors.New("sluice: no algorithm")
	// ErrNoStore reports a limiter without a store.
	ErrNoStore = errors.New("sluice: no store")
	// ErrClosed reports a call to a store after its Close.
	ErrClosed = errors.New("sluice: store closed")
	// ErrInvalidTime reports a request whose Now is before the Unix epoch
	// or too far after it to count in exact microseconds (see [MaxExact]).
	ErrInvalidTime = errors.New("sluice: invalid time")
	// ErrUnsupported reports an operation a store or an algorithm cannot
	// do, such as Reset on a store that keeps no state of its own, or a
	// reservation under an algorithm that cannot reserve.
	ErrUnsupported = errors.New("sluice: not supported by this store")
	// ErrInvalidRequest reports a request or batch that cannot be decided
	// as asked, such as a MaxWait on a request that is not a reservation,
	// or a batch naming one key and algorithm twice.
	ErrInvalidRequest = errors.New("sluice: invalid request")
	// ErrCleanup reports a refund or a release that sluice made on a
	// caller's behalf and could not confirm within [CleanupTimeout]: the
	// capacity may still be charged, until the key's state recovers or
	// the lease expires. A refund that timed out may nonetheless have
	// been applied (a store never replays a call that timed out), so
	// sluice does not try it again; it reports it, joined with the
	// error that made the caller give up.
	ErrCleanup = errors.New("sluice: refund or release not confirmed")
)

// MaxKeyLen is the longest key, in bytes, a request may carry. Keys come
// from clients (addresses, user ids, headers); the bound keeps a hostile
// key from costing more memory than a legitimate one.
const MaxKeyLen = 1024

// Source says what produced a [Decision]. The zero value, [SourceStore],
// means the store ran the algorithm; decorators set the others so that
// headers and spans can say how a decision was reached.
type Source uint8

// The sources of a decision.
const (
	SourceStore      Source = iota // the store ran the algorithm
	SourceCache                    // a local cache answered (a cached denial)
	SourceAllotment                // tokens taken from the store in advance were spent locally
	SourceFailOpen                 // the store failed and the policy allowed
	SourceFailClosed               // the store failed and the policy denied
	SourceDegraded                 // the store failed and a local fallback (degrade mode) decided
	SourceShadow                   // shadow mode: the real decision was a denial, reported as allowed
	SourceAllowList                // the key is on an allow list: allowed without a decision
	SourceDenyList                 // the key is on a deny list: denied without a decision
)

var sourceNames = [...]string{"store", "cache", "allotment", "fail-open", "fail-closed", "degraded", "shadow", "allow-list", "deny-list"}

// String returns the source's name as used in telemetry: "store", "cache",
// "allotment", "fail-open", "fail-closed", "degraded", "shadow", "allow-list"
// or "deny-list".
func (s Source) String() string {
	if int(s) < len(sourceNames) {
		return sourceNames[s]
	}
	return fmt.Sprintf("Source(%d)", uint8(s))
}

// Decision is a store's answer to a [Request]. A denial is a Decision with
// Allowed false and a nil error; an error means the store failed. Its
// one-byte fields come first and share a word: every layer of a chain
// returns a Decision by value, 96 bytes rather than 112.
type Decision struct {
	// Allowed reports whether the request was admitted (and, unless it was
	// a peek, charged).
	Allowed bool
	// Source says what produced the decision.
	Source Source
	// Near marks an admission that left less than a near-limit fraction
	// of Limit: a client about to be limited. Only a policy sets it
	// (policy.WithNearLimit); middleware and telemetry read it
	// (ratelimit.near_limit counts it).
	Near bool
	// Healed reports that the store found the key's state unreadable,
	// written by something other than sluice (a value of another type or
	// length, or numbers no state holds), decided as for a key never
	// charged, and replaced the value in the same atomic step: with the
	// new state if the decision charged, else by deleting it. Such a key
	// can grant at most one fresh burst. Only the Redis stores set it;
	// telemetry counts it (ratelimit.store.healed) and marks the span.
	Healed bool
	// Limit is the largest cost admitted at once: the burst for the bucket
	// algorithms, the rate for the window algorithms.
	Limit int64
	// Remaining is the cost that would still be admitted right after this
	// decision, in whole requests: Level's whole tokens, rounded down,
	// and never negative.
	Remaining int64
	// RetryAfter is zero when Allowed. After a denial it is the exact wait
	// until the same request would be admitted, if nothing else is
	// charged in between: a retry at that instant passes, a microsecond
	// earlier fails. It is [RetryNever] when the cost can never be
	// admitted (see [Decision.Unsatisfiable]). Waits count from At, the
	// instant of the decision.
	RetryAfter time.Duration
	// ResetAfter is the wait until the key is back to full capacity, as if
	// it had never been used; zero when it already is.
	ResetAfter time.Duration
	// Delay is how long the caller of an admitted reservation
	// ([Terms.MaxWait]) must wait before it acts: the capacity it was
	// charged is available only then. Zero for every other decision.
	Delay time.Duration
	// At is the instant the decision was made at, in whole microseconds,
	// in UTC: the request's instant ([Terms.Now] rounded down to a
	// microsecond, or the store's clock) or, if the key was last charged
	// later than that (clocks disagree), the last charge's. RetryAfter,
	// ResetAfter and Delay count from it: At.Add(RetryAfter) is when the
	// request would pass. Every sluice store sets it, the Redis stores
	// from the server's clock; a decision made without a store's clock (a
	// request under [Inf], an outage policy's or a list's answer, see
	// [Request.Answer]) carries the request's Now or the local clock's
	// reading.
	At time.Time
	// Level is the key's level right after the decision (for a peek,
	// after the charge it would make), exactly, in fractions of a token:
	// below zero while the key owes more than it holds. A decision of cost
	// 0 (sluice.Limiter.Level) reports the level at its instant. Its PerToken
	// is 0 where the level is unknown (see [Level]).
	Level Level
	// Admitted is, for a partial admission ([OpAtMost],
	// sluice.Limiter.AllowAtMost), the cost admitted and charged: 1 to the
	// request's Cost when Allowed, 0 when denied. It is 0 for every other
	// operation, which admits the whole of its cost or none of it.
	Admitted int64
}

// Level is how much of its limit a key holds at an instant, exactly:
// Units/PerToken tokens, what x/time/rate's Limiter.Tokens reports of its
// one bucket. For the token bucket and GCRA it is the bucket's level,
// which refills by fractions of a token and falls below zero while
// reservations are owed; for the window algorithms, the cost the window
// still admits, fractional for the sliding window counter, whose previous
// window weighs in part, and below zero when a lowered rate leaves the
// window holding more than it admits; for the concurrency algorithm, the
// free slots. A Decision carries the level right after it; a decision of
// cost 0 (sluice.Limiter.Level, sluice.Stack.Level) reads it without
// changing it.
//
// Levels are exact: Units and PerToken are integers below 2^53, the same
// from every store. The zero Level is an unknown one.
type Level struct {
	// Units is the level in units of 1/PerToken of a token.
	Units int64
	// PerToken is how many units make a token: the limit's units per
	// token ([Limit.Units]) for the token bucket and GCRA, the period in
	// µs for the sliding window counter, 1 for the fixed window, the
	// sliding window log and the concurrency algorithm, and 1 for [Inf],
	// whose level is [math.MaxInt64]. It is 0 when the level is unknown: a
	// decision made without asking the store (an outage policy's, a
	// list's, or a local cache's from an earlier answer) or by an
	// algorithm of your own that does not report it.
	PerToken int64
}

// Tokens returns the level in tokens, Units/PerToken, rounded to the
// nearest float64 (exact when the level is a whole number of tokens); 0
// for an unknown level.
func (l Level) Tokens() float64 {
	if l.PerToken == 0 {
		return 0
	}
	return float64(l.Units) / float64(l.PerToken)
}

// Known reports whether the level is known: its PerToken is not 0.
func (l Level) Known() bool { return l.PerToken != 0 }

// String formats the level in tokens: a whole number exactly ("3",
// "-2"), else as the shortest decimal that reads back as Tokens ("2.5",
// "-0.1"); "unknown" for an unknown level.
func (l Level) String() string {
	switch {
	case l.PerToken == 0:
		return "unknown"
	case l.Units%l.PerToken == 0:
		return strconv.FormatInt(l.Units/l.PerToken, 10)
	}
	return strconv.FormatFloat(l.Tokens(), 'f', -1, 64)
}

// Unsatisfiable reports whether the request will never be admitted: its
// cost is larger than its limit's capacity, or its key is on a deny list
// ([SourceDenyList]). The store's state was left unchanged.
func (d Decision) Unsatisfiable() bool { return !d.Allowed && d.RetryAfter == RetryNever }

// Request asks a store to decide for one key: the key, the cost and the
// operation of this call, under terms ([Terms]) a limiter builds once and
// shares between its calls. It is six words, so that it passes to
// [Store.Apply] in registers: a caller that stores a request's fresh
// fields in memory and copies it into the call waits for those stores to
// reach the cache (12 to 14 ns of an 87 to 89 ns decision on the in-memory
// store). Its terms' fields read as its own (req.Limit is
// req.Terms.Limit). Terms do not change once a request carrying them has
// been given to a store, which may still read them after a call it left
// running has returned: to decide under other terms, build new ones or
// change a [Request.Clone].
//
// A request is validated once, where it is decided: a store validates
// every request with [Request.Validate] before it acts on it, and a
// decorator validates only a request it answers without its store (a
// list, an outage mode, a cache); one that passes a request on leaves it
// to the store.
type Request struct {
	// Key identifies whose budget is charged. It must be 1 to [MaxKeyLen]
	// bytes. The same key under two algorithms names two states.
	Key string
	// Cost is how much of the limit the request uses. Zero is allowed: it
	// is always admitted and, like a peek, changes nothing. Costs below
	// zero or above [MaxUnits] are invalid. For a partial admission
	// ([OpAtMost]) it is the most to admit, at least 1.
	Cost int64
	// Op is what the request does: charge (the zero value), peek, refund,
	// reserve or admit in part. See [Op].
	Op Op
	// Lease names a lease of the concurrency algorithm
	// (algorithms.Concurrency), 1 to [MaxUnits]: a charge acquires Cost
	// slots under it, or renews them if the key holds it already; a
	// refund releases them. Other algorithms ignore it. sluice.Limiter.Acquire
	// chooses leases at random.
	Lease int64
	// Terms are what the request is decided under; required.
	*Terms
}

// Terms are what a request is decided under: the algorithm and limit, the
// instant when not the store's clock, and a reservation's bounds.
// sluice.Limiter and sluice.Stack build them once per limiter and rule.
type Terms struct {
	// Algorithm decides; required.
	Algorithm Algorithm
	// Limit is the limit to decide under. It travels with every request,
	// so a key's limit can change between calls: each algorithm documents
	// what it does with state written under another limit.
	Limit Limit
	// Now, when not zero, is the instant to decide at, from 1970 to the
	// year 2112 (see [MaxUnits]). Stores decide in whole microseconds: an
	// instant between two is rounded down to the earlier (as
	// [time.Time.Truncate] rounds it), and the decision's At shows the
	// instant used. The zero value means the store's own clock (the
	// server's clock for Redis). sluice.Limiter.At and sluice.Stack.At set it.
	Now time.Time
	// MaxWait is how far ahead a reservation ([OpReserve]) may be
	// admitted; it must be positive for a reservation and zero for every
	// other operation. If the request would be admitted within MaxWait
	// (counting every charge made before it, reservations included), it
	// is charged now, the key going into debt, and the decision is
	// allowed with a [Decision.Delay] the caller must wait before acting.
	// A reservation that would need longer is denied and charges nothing.
	// Only algorithms that implement [Reserver] can reserve; for others
	// the request fails with [ErrUnsupported]. A key's debt never exceeds
	// [MaxUnits] units (see [Limit.Units]), which for any practical limit
	// is far beyond a deadline.
	MaxWait time.Duration
	// MaxQueue, when positive, bounds a reservation's queue as MaxWait
	// bounds its wait: the reservation is admitted only if, after it, the
	// key owes at most MaxQueue units of cost (tokens). A reservation's
	// debt is its queue: a key in debt by d tokens has d reservations of
	// cost 1 still waiting, this one included, so with costs of 1 at most
	// MaxQueue callers wait per key, across every process sharing the
	// store. Counted in cost rather than time, the bound holds whatever
	// the limit each request carries. Zero means no bound but MaxWait; it
	// must be zero for every operation but [OpReserve], and at most
	// [MaxUnits]. sluice.Limiter.WithQueue and sluice.Stack.WithQueue set it.
	MaxQueue int64
}

// Validate checks the request's key, algorithm, cost, operation and
// limit, returning an error that wraps one of the sentinel errors.
func (r *Request) Validate() error {
	// Most requests are a charge, peek or refund on the store's clock,
	// with no lease, under a limit checked when it was built: those take
	// a few comparisons and the algorithm's own check. The rest, and
	// every invalid request, take the checks below, which say what is
	// wrong.
	if uint(len(r.Key)-1) < MaxKeyLen && r.Terms != nil && r.Algorithm != nil && uint64(r.Cost) <= MaxUnits &&
		r.Op <= OpRefund && r.MaxWait == 0 && r.MaxQueue|r.Lease == 0 && r.Now.IsZero() && r.Limit.valid() {
		return r.Algorithm.Validate(r.Limit)
	}
	return r.validate()
}

// validate is [Request.Validate] for every request: each check in turn.
func (r *Request) validate() error {
	if err := ValidateKey(r.Key); err != nil {
		return err
	}
	switch {
	case r.Terms == nil:
		return fmt.Errorf("%w: the request has no terms", ErrNoAlgorithm)
	case r.Algorithm == nil:
		return ErrNoAlgorithm
	case r.Cost < 0:
		return fmt.Errorf("%w: %d is negative", ErrInvalidCost, r.Cost)
	case r.Cost > MaxUnits:
		return fmt.Errorf("%w: %d exceeds 2^52", ErrInvalidCost, r.Cost)
	case !r.Now.IsZero() && (r.Now.Before(epoch) || !r.Now.Before(maxTime)):
		return fmt.Errorf("%w: %v is outside 1970 to %v", ErrInvalidTime, r.Now, maxTime)
	case r.Op > OpAtMost:
		return fmt.Errorf("%w: unknown operation %d", ErrInvalidRequest, r.Op)
	case r.Op == OpAtMost && r.Cost < 1:
		return fmt.Errorf("%w: a partial admission of at most %d; want at least 1", ErrInvalidCost, r.Cost)
	case r.Lease < 0 || r.Lease > MaxUnits:
		return fmt.Errorf("%w: lease %d is outside 0 to 2^52", ErrInvalidRequest, r.Lease)
	case r.Op == OpReserve && r.MaxWait <= 0:
		return fmt.Errorf("%w: a reservation needs a positive MaxWait, not %v", ErrInvalidRequest, r.MaxWait)
	case r.Op != OpReserve && r.MaxWait != 0:
		return fmt.Errorf("%w: MaxWait belongs to reservations, not to a %v", ErrInvalidRequest, r.Op)
	case r.MaxQueue < 0 || r.MaxQueue > MaxUnits:
		return fmt.Errorf("%w: MaxQueue %d is outside 0 to 2^52", ErrInvalidRequest, r.MaxQueue)
	case r.Op != OpReserve && r.MaxQueue != 0:
		return fmt.Errorf("%w: MaxQueue belongs to reservations, not to a %v", ErrInvalidRequest, r.Op)
	}
	if err := r.Limit.Validate(); err != nil {
		return err
	}
	if r.Limit.IsInf() {
		return nil
	}
	if r.Op == OpReserve && !Reserves(r.Algorithm) {
		return fmt.Errorf("%w: algorithm %q cannot reserve", ErrUnsupported, r.Algorithm.Name())
	}
	if r.Op == OpAtMost && Leases(r.Algorithm) {
		return fmt.Errorf("%w: algorithm %q holds leases, which cannot be admitted in part", ErrUnsupported, r.Algorithm.Name())
	}
	return r.Algorithm.Validate(r.Limit)
}

// Clone returns a copy of r with terms of its own: a copy of r's (empty
// if r has none), which may be changed without changing any other
// request's.
func (r Request) Clone() Request {
	var t Terms
	if r.Terms != nil {
		t = *r.Terms
	}
	r.Terms = &t
	return r
}

// As returns r as operation op, under r's terms less a reservation's
// bounds (MaxWait, MaxQueue) unless op reserves: the refund or the peek
// of a reservation, which has them on a clone of its terms.
func (r Request) As(op Op) Request {
	if op != OpReserve && r.Terms != nil && (r.MaxWait != 0 || r.MaxQueue != 0) {
		r = r.Clone()
		r.MaxWait, r.MaxQueue = 0, 0
	}
	r.Op = op
	return r
}

// Step returns what the request asks of its algorithm at now, in µs since
// the Unix epoch: the arguments of [Algorithm.Transition]. Its limit must
// not be [Inf]. A reservation's step is a charge with a [Step.Debt]; a
// partial admission's ([OpAtMost]) is a charge of its whole Cost, which
// [Run] turns into what it admits (a store that runs the step alone
// admits all or nothing, never more than the limit).
func (r *Request) Step(now int64) Step {
	st := Step{Now: now, Cost: r.Cost, Limit: r.Limit, Op: r.Op, Lease: r.Lease}
	if r.Op == OpAtMost {
		st.Op = OpCharge
	}
	if r.Op == OpReserve {
		// A key may owe at most 2^52 units less its capacity, so that the
		// time to refill it stays within 2^52 µs.
		st.Op = OpCharge
		st.Debt = MaxUnits - r.Limit.burst*r.Limit.unit
		if w, per := r.MaxWait.Microseconds(), r.Limit.refill; w < st.Debt/per {
			st.Debt = w * per
		}
		// A queue of q tokens is a debt of q tokens' units under this
		// request's limit.
		if q, unit := r.MaxQueue, r.Limit.unit; q > 0 && q < st.Debt/unit {
			st.Debt = q * unit
		}
	}
	return st
}

// Op is what a request does to its key: the verbs of sluice.Limiter and
// sluice.Stack as a store receives them.
type Op uint8

// The operations. An algorithm's [Step] carries only the first three (a
// reservation reaches it as a charge with [Step.Debt], a partial
// admission as a peek of cost 0 and then a charge, see [Run]); Lua twins
// receive them as the numbers 0, 1 and 2 (the Redis stores' prelude
// turns a partial admission, 3, into those).
const (
	// OpCharge charges the cost if the limit admits it now (Allow).
	OpCharge Op = iota
	// OpPeek decides as a charge would, without changing anything (Peek).
	OpPeek
	// OpRefund gives the cost back: it undoes an admission of that cost,
	// such as a reservation cancelled before it was used, or releases a
	// concurrency lease. The bucket algorithms return the units exactly,
	// never above a fresh key's capacity; the window algorithms return
	// the cost to the window of the key's last charge while that window
	// still counts (each algorithm documents it). A refund's decision is
	// allowed and reports the key after it.
	OpRefund
	// OpReserve charges the cost if the limit admits it within
	// [Terms.MaxWait], letting the key go into debt (Reserve, Wait).
	OpReserve
	// OpAtMost charges as much of the cost as the limit admits now, at
	// least 1 and at most Cost (AllowAtMost, redis_rate's AllowAtMost):
	// the largest cost the algorithm admits, which a decision of cost 0
	// reports as its Remaining, charged in the same atomic step. When not
	// even 1 fits, the request is denied as a charge of 1 would be, its
	// RetryAfter saying when one will. [Decision.Admitted] is the cost
	// charged. In a batch ([Store]'s ApplyAll) every request under a
	// limit is charged the same cost: the largest every one of them
	// admits, at most the least of their costs, or none (see [RunAll]).
	// Algorithms that hold leases ([Leaser]) cannot admit in part.
	OpAtMost
)

var opNames = [...]string{"charge", "peek", "refund", "reserve", "at-most"}

// String returns the operation's name: "charge", "peek", "refund",
// "reserve" or "at-most".
func (o Op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Step is one request as an algorithm sees it, in integer microseconds.
// [Request.Step] makes one.
type Step struct {
	// Now is the instant to decide at, in µs since the Unix epoch.
	// Algorithms decide at max(Now, State.Last).
	Now int64
	// Cost is the request's cost, 0 to [MaxUnits].
	Cost int64
	// Limit is the limit to decide under; never [Inf].
	Limit Limit
	// Op is [OpCharge], [OpPeek] or [OpRefund]; never [OpReserve],
	// which reaches an algorithm as a charge with a Debt, nor [OpAtMost],
	// which reaches it as a peek of cost 0 and then a charge ([Run]).
	Op Op
	// Debt is how far, in units (see [Limit.Units]), an admission may take
	// the key below empty: for a reservation, MaxWait × units per µs, at
	// most MaxQueue × units per token when MaxQueue is set, and at most
	// [MaxUnits] less the limit's capacity in units; zero for every other
	// request.
	Debt int64
	// Lease is the request's lease ([Request.Lease]); 0 if none.
	Lease int64
}

// The instants a request may carry: from the Unix epoch to MaxUnits µs
// after it.
var epoch, maxTime = time.Unix(0, 0).UTC(), time.UnixMicro(MaxUnits).UTC()

// ValidateKey reports an empty key or one longer than [MaxKeyLen], with an
// error wrapping [ErrInvalidKey].
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: %d bytes, longer than %d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	return nil
}

// State is the small per-key record an algorithm keeps. It is one fixed
// record for every algorithm, so an in-process store can keep states by
// value without allocating, and a Lua twin can keep the same numbers, in
// the same order, in one Redis key. The zero State is a key that has
// never been charged.
//
// Last and Expires mean the same for every algorithm; Vals are the
// algorithm's own numbers, and each algorithm names their indexes and
// documents them:
//
//	algorithm               Vals[0]                Vals[1]                  Vals[2]
//	token bucket            level in units at Last units per token of it    -
//	GCRA                    TAT, whole µs          TAT's fraction in ticks  perMicro of the ticks
//	fixed window            window start (µs)      count in it              -
//	sliding window counter  window start (µs)      count in it              previous window's count
//	sliding window log      cost in Log[Vals[1]:]  first live entry         -
//	concurrency             slots held             -                        -
//
// The sliding window log keeps its charges in Log, and the concurrency
// algorithm its slots, as (expiry, lease). Stores keep the numbers in the
// order Last, Vals[0], Vals[1], Vals[2], Expires.
type State struct {
	// Last is the instant, in microseconds since the Unix epoch, of the
	// last charge. Algorithms decide at max(Last, now), so a state's clock
	// never runs backwards even when callers' clocks disagree.
	Last int64
	// Vals are the algorithm's numbers, read through the names the
	// algorithm gives their indexes.
	Vals [3]int64
	// Expires is the instant, in µs since the Unix epoch, from which the
	// state is forgotten: when the last charge will have fully recovered
	// under the limit it was made under. From Expires on, every algorithm
	// decides as for the zero State, whatever the limit, so a store that
	// drops a state at Expires or later decides exactly as one that keeps
	// it forever.
	Expires int64
	// Log holds the sliding window log's charges and the concurrency
	// algorithm's slots; nil for the others.
	Log []LogEntry
}

// LogEntry is one charge in a sliding window log: Cost charged at At
// microseconds since the Unix epoch.
type LogEntry struct {
	At, Cost int64
}

// Algorithm is a rate-limiting algorithm: a pure transition over a [State],
// in integer microseconds. The algorithms package holds sluice's own; a
// store runs whichever a request names.
type Algorithm interface {
	// Name is the algorithm's stable name, such as "token-bucket". Stores
	// use it in keys and to find the algorithm's script, so two
	// algorithms used with one store must not share a name.
	Name() string
	// Validate reports limits this algorithm cannot decide exactly under,
	// wrapping [ErrInvalidLimit]. It is called only with limits that
	// passed [Limit.Validate] and are not [Inf].
	Validate(Limit) error
	// Horizon is the longest a state written under l can matter: a
	// state's Expires is never further than this after its last charge.
	// A store that cannot read Expires (one whose clock is not the
	// requests') may forget a state this long after its last charge.
	Horizon(l Limit) time.Duration
	// Transition decides step st with the key's state s. It changes s
	// only when it admits a charge of positive cost, or refunds one. Its
	// inputs have been validated ([Request.Validate]) and the limit is
	// not [Inf]. Transition must not retain s.
	//
	// The decision's Remaining after a step of cost 0 is the largest cost
	// the algorithm admits at that instant: a partial admission
	// ([OpAtMost]) charges it. Its Level is the key's level after the
	// step, or the zero Level if the algorithm has none to report. Its
	// At and Admitted are left zero: [Run], which every store calls,
	// sets them; [Run] calls it through [Transition].
	Transition(s *State, st Step) Decision
}

// Reserver is implemented by algorithms that can reserve: admit a request
// now that may act only later, by letting a key go into debt (see
// [Terms.MaxWait] and [Step.Debt]). The bucket algorithms, the token
// bucket and GCRA, reserve (and so can queue, see [Terms.MaxQueue]);
// the window algorithms, whose capacity returns all at once at a
// boundary, and the concurrency algorithm, whose slots are held rather
// than spent, do not.
type Reserver interface {
	Algorithm
	// Reserves reports whether the algorithm honours [Step.Debt]; an
	// algorithm that implements Reserver but returns false is treated as
	// one that does not.
	Reserves() bool
}

// AlgorithmAs finds an ability of alg: it returns alg as a T if alg is
// one, else the first algorithm alg wraps that is, following each
// algorithm's Unwrap() Algorithm method (as [Named]'s does), as
// [errors.As] follows errors. It is how a store or decorator asks what an
// algorithm can do, so that a wrapper such as a stack's rule keeps every
// ability of the algorithm it wraps; an algorithm of your own that wraps
// another gives it an Unwrap method to do the same.
func AlgorithmAs[T Algorithm](alg Algorithm) (T, bool) {
	for range maxUnwrap {
		if t, ok := alg.(T); ok {
			return t, true
		}
		u, ok := alg.(interface{ Unwrap() Algorithm })
		if !ok {
			break
		}
		if alg = u.Unwrap(); alg == nil {
			break
		}
	}
	var zero T
	return zero, false
}

// maxUnwrap bounds the walk of [AlgorithmAs], in case an algorithm
// unwraps to itself.
const maxUnwrap = 16

// Reserves reports whether alg can reserve: it is a [Reserver] (or wraps
// one, see [AlgorithmAs]) that says it does.
func Reserves(alg Algorithm) bool {
	r, ok := AlgorithmAs[Reserver](alg)
	return ok && r.Reserves()
}

// Store keeps limiter state and runs algorithms' transitions on it
// atomically. Every method is required, so that an ability cannot be lost
// on the way through a chain of decorators: a decorator that does not say
// what it does with a batch, a reset or a close does not compile.
//
// Implementations must be safe for concurrent use, must validate every
// request they decide ([Request.Validate], stores.ValidateAll) before they
// act on it, since the layers above them do not, must return a denial as
// a Decision, keeping errors for invalid requests and failures of the
// store itself, and must fail with [ErrClosed] after Close.
type Store interface {
	// Apply decides one request atomically for its key: two calls for the
	// same key never interleave.
	Apply(ctx context.Context, req Request) (Decision, error)
	// ApplyAll decides reqs together, writing each request's decision to
	// out (as long as reqs): if every request is admitted, all take
	// effect; if any is denied, none does, and out holds what each would
	// have got. It rejects what stores.ValidateAll rejects before
	// touching any state. It keeps neither slice once it returns (a call
	// it leaves running works on copies, sharing the requests' terms,
	// which do not change), so that a caller may reuse them. A store that decides a batch in one atomic step
	// says so in its documentation; one that cannot calls
	// stores.ApplyInTurn, which charges in turn and refunds, by name
	// (package [github.com/sluicehq/sluice/stores]).
	ApplyAll(ctx context.Context, reqs []Request, out []Decision) error
	// Reset forgets key's state under alg, as if it had never been
	// charged. A store that cannot forget returns an error wrapping
	// [ErrUnsupported].
	Reset(ctx context.Context, key string, alg Algorithm) error
	// Close releases what the store holds and, for a decorator, closes
	// the store it wraps, so that a chain closes as one. Later calls fail
	// with [ErrClosed].
	Close() error
}

// Named returns alg under another name, alg's own followed by "/" and
// name, so that a rule's state is kept apart from every other state of
// the same key (two token buckets on one key: a burst and a daily quota).
// It decides exactly as alg, and keeps every ability alg has: its
// Unwrap returns alg, which [AlgorithmAs] looks through.
func Named(alg Algorithm, name string) Algorithm {
	return named{Algorithm: alg, name: alg.Name() + "/" + name}
}

type named struct {
	Algorithm
	name string
}

func (n named) Name() string { return n.name }

// Unwrap returns the algorithm named.
func (n named) Unwrap() Algorithm { return n.Algorithm }

// Transition runs alg's transition on s, looking through the name [Named]
// gave alg, whose transition is alg's own. [Run] and memstore call it
// rather than the method, to spare each decision of a sluice.Stack's
// rule the call the name adds (about 8 ns of 97 on memstore).
func Transition(alg Algorithm, s *State, st Step) Decision {
	if n, ok := alg.(named); ok {
		alg = n.Algorithm
	}
	return alg.Transition(s, st)
}

// CleanupTimeout bounds each refund or release sluice makes on a
// caller's behalf: sluice.Reservation.Cancel, the refund of a
// sluice.Limiter.Wait or sluice.Stack.Wait whose context ended,
// sluice.Lease.Release, stores.ApplyInTurn's refunds, and the release
// of a lease whose acquisition was cut short. Such a call runs with the
// caller's context values but not its cancellation, since it is made
// because the caller gave up, and ends at this deadline: no call of
// sluice outlives its context by more than CleanupTimeout, even when the
// store hangs. A store that answers at all answers far sooner.
const CleanupTimeout = 500 * time.Millisecond

// Leaser is implemented by algorithms that hold leases ([Request.Lease]):
// the concurrency algorithm, which limits how many leases a key holds at
// once rather than a rate.
type Leaser interface {
	Algorithm
	// Leases reports whether the algorithm honours [Request.Lease].
	Leases() bool
}

// Leases reports whether alg holds leases: it is a [Leaser] (or wraps
// one, see [AlgorithmAs]) that says it does.
func Leases(alg Algorithm) bool {
	l, ok := AlgorithmAs[Leaser](alg)
	return ok && l.Leases()
}
