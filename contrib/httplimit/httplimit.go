package httplimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/core"
)

// ErrFailClosed is what the error handler is given when the stack's
// failure policy answered fail-closed ([core.SourceFailClosed]): the store
// is down and the policy chose to deny rather than guess.
var ErrFailClosed = errors.New("httplimit: store unavailable, failing closed")

// ErrInvalidOption reports a configuration [New] cannot use; the error
// says which and why.
var ErrInvalidOption = errors.New("httplimit: invalid option")

// DeniedFunc answers a request the stack denied. See [WithDeniedHandler].
type DeniedFunc func(w http.ResponseWriter, r *http.Request, d Denial)

// ErrorFunc answers a request the middleware could not decide. See
// [WithErrorHandler] and [WithNoKeyHandler].
type ErrorFunc func(w http.ResponseWriter, r *http.Request, err error)

// Denial describes a denied request to a [DeniedFunc].
type Denial struct {
	// Rule is the name of the binding rule: of the rules that denied, the
	// one whose wait is longest (see [core.Binding]).
	Rule string
	// Violated names every rule that denied, in the stack's order.
	Violated []string
	// Verdict is the stack's answer: the binding rule's decision, and
	// each rule's from [sluice.Verdict.Rules]. No rule was charged.
	Verdict sluice.Verdict
	// Cost is what the request would have cost under each rule.
	Cost int64
	// RetryAfter is the delay sent in the Retry-After header: the binding
	// decision's RetryAfter rounded up to whole seconds, plus any jitter.
	// For a middleware that shapes ([WithQueue], [WithMaxDelay]) it is
	// instead the time until the request would be taken into the line,
	// rounded up, at least 1 s. It is zero when the request can never be
	// admitted ([core.Decision.Unsatisfiable]); no Retry-After is sent
	// then.
	RetryAfter time.Duration
}

// rule is one rule of the middleware's stack.
type rule struct {
	name   string
	quoted string     // name as a structured field String
	item   string     // the RateLimit-Policy item; "" for an Inf limit
	key    KeyFunc    // nil: the default key function
	limit  core.Limit // the rule's limit, for the wait of a full line
}

// Middleware limits the requests an [http.Handler] serves with a
// [sluice.Stack]. Make one with [New] and wrap handlers with
// [Middleware.Handler]. It is safe for concurrent use.
type Middleware struct {
	stack   *sluice.Stack
	rules   []rule
	leases  bool   // a rule holds concurrency leases
	shaping bool   // WithQueue or WithMaxDelay: requests wait their turn
	policyH string // RateLimit-Policy: every rule's item
	settings
}

// New returns a middleware that charges each request to every rule of
// stack, all or nothing, each rule on the key its key function finds
// ([WithKey]; the default key function, [WithKeyFunc], for the others).
// If the stack has a concurrency rule ([core.Leases]), the request's
// slots are held while the handler runs.
//
// New fails with an error wrapping [ErrInvalidOption] for a nil stack, a
// [WithKey] naming a rule the stack lacks (or naming one twice, or with a
// nil function), and a bad key or header configuration (a prefix length
// out of range, an invalid trusted proxy prefix, an unknown forwarding
// header or header set).
func New(stack *sluice.Stack, opts ...Option) (*Middleware, error) {
	if stack == nil {
		return nil, fmt.Errorf("%w: nil stack", ErrInvalidOption)
	}
	c := config{settings: settings{headers: HeadersDraft}}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", ErrInvalidOption)
		}
		o.apply(&c)
	}
	m := &Middleware{stack: stack, settings: c.settings}
	switch {
	case c.headers&^headersAll != 0:
		return nil, fmt.Errorf("%w: unknown header set %#x", ErrInvalidOption, uint8(c.headers))
	case c.headers&HeadersX != 0 && c.headers&HeadersXEpoch != 0:
		return nil, fmt.Errorf("%w: HeadersX and HeadersXEpoch both set X-RateLimit-Reset; choose one", ErrInvalidOption)
	case c.jitter < 0:
		return nil, fmt.Errorf("%w: negative retry jitter %v", ErrInvalidOption, c.jitter)
	case c.v4set && (c.v4 < 1 || c.v4 > 32):
		return nil, fmt.Errorf("%w: IPv4 prefix length %d is outside 1 to 32", ErrInvalidOption, c.v4)
	case c.v6set && (c.v6 < 1 || c.v6 > 128):
		return nil, fmt.Errorf("%w: IPv6 prefix length %d is outside 1 to 128", ErrInvalidOption, c.v6)
	case c.delaySet && c.maxDelay <= 0:
		return nil, fmt.Errorf("%w: WithMaxDelay(%v): want a positive delay", ErrInvalidOption, c.maxDelay)
	case c.nowSet && c.now == nil:
		return nil, fmt.Errorf("%w: WithNow(nil)", ErrInvalidOption)
	}
	m.at = c.nowSet
	if c.queueSet {
		q, err := stack.WithQueue(c.queue)
		if err != nil {
			return nil, fmt.Errorf("%w: WithQueue(%d): %w", ErrInvalidOption, c.queue, err)
		}
		m.stack = q
	}
	if c.queueSet || c.delaySet {
		m.shaping = true
		if !c.delaySet {
			m.maxDelay = math.MaxInt64 // as long as the queue needs
		}
	}
	c.ip.IPv4Prefix, c.ip.IPv6Prefix = c.v4, c.v6
	ip, err := NewClientIP(c.ip)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	if m.key == nil {
		m.key = ip.Key
	}
	if m.denied == nil {
		m.denied = WriteDenied
	}
	if m.onError == nil {
		m.onError = WriteUnavailable
	}
	if m.noKey == nil {
		m.noKey = WriteNoKey
	}
	if m.now == nil {
		m.now = time.Now
	}
	var items []string
	for _, r := range stack.Rules() {
		if err := validName(r.Name); err != nil {
			return nil, err
		}
		p := rule{name: r.Name, quoted: strconv.Quote(r.Name), limit: r.Limit}
		if p.item = policyItem(p.quoted, r.Algorithm, r.Limit); p.item != "" {
			items = append(items, p.item)
		}
		m.rules = append(m.rules, p)
		m.leases = m.leases || core.Leases(r.Algorithm)
	}
	if m.shaping && m.leases {
		return nil, fmt.Errorf("%w: WithQueue and WithMaxDelay need rules that reserve; the stack has a concurrency rule", ErrInvalidOption)
	}
	if m.shaping {
		for _, r := range stack.Rules() {
			if !r.Limit.IsInf() && !core.Reserves(r.Algorithm) {
				return nil, fmt.Errorf("%w: WithMaxDelay: rule %q: %w: algorithm %q cannot reserve", ErrInvalidOption, r.Name, core.ErrUnsupported, r.Algorithm.Name())
			}
		}
	}
	m.policyH = strings.Join(items, ", ")
	for _, k := range c.keys {
		i := m.rule(k.rule)
		switch {
		case i < 0:
			names := make([]string, len(m.rules))
			for j := range m.rules {
				names[j] = m.rules[j].quoted
			}
			return nil, fmt.Errorf("%w: WithKey(%q): the stack has no such rule (its rules: %s)", ErrInvalidOption, k.rule, strings.Join(names, ", "))
		case k.key == nil:
			return nil, fmt.Errorf("%w: WithKey(%q): nil key function", ErrInvalidOption, k.rule)
		case m.rules[i].key != nil:
			return nil, fmt.Errorf("%w: WithKey(%q) is given twice", ErrInvalidOption, k.rule)
		}
		m.rules[i].key = k.key
	}
	return m, nil
}

// rule returns the index of the rule named name, or -1.
func (m *Middleware) rule(name string) int {
	for i := range m.rules {
		if m.rules[i].name == name {
			return i
		}
	}
	return -1
}

// validName reports a rule name that cannot be sent as a structured field
// String: one with a byte outside printable ASCII. [sluice.NewStack] allows
// only letters, digits, '-', '_' and '.', all of them printable ASCII; the
// check keeps the headers valid should that ever widen. A printable ASCII
// name, quoted by [strconv.Quote], is exactly its sf-string
// serialization: only '"' and '\' are escaped, with a backslash.
func validName(name string) error {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("%w: rule name %q has a byte (%#x) outside printable ASCII", ErrInvalidOption, name, c)
		}
	}
	return nil
}

// Handler returns next limited by m. Its method value is a
// func(http.Handler) http.Handler, the shape of most middleware chains.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.serve(w, r, next)
	})
}

// keys returns the request's key under each rule in buf, grown if need
// be, calling the default key function at most once.
func (m *Middleware) keys(r *http.Request, buf []string) ([]string, error) {
	keys := buf[:0]
	if cap(keys) < len(m.rules) {
		keys = make([]string, 0, len(m.rules))
	}
	keys = keys[:len(m.rules)]
	var dflt string
	for i := range m.rules {
		f := m.rules[i].key
		if f == nil && dflt != "" {
			keys[i] = dflt
			continue
		}
		if f == nil {
			f = m.key
		}
		k, err := f(r)
		if err != nil {
			return nil, fmt.Errorf("rule %q: %w", m.rules[i].name, err)
		}
		if m.rules[i].key == nil {
			dflt = k
		}
		keys[i] = k
	}
	return keys, nil
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	var buf [4]string // the keys of a stack of up to 4 rules, without allocating
	keys, err := m.keys(r, buf[:])
	if err != nil {
		m.noKey(w, r, err)
		return
	}
	cost := int64(1)
	if m.cost != nil {
		cost = m.cost(r)
	}
	ctx := r.Context()
	stack := m.stack
	if m.at {
		stack = stack.At(m.now())
	}
	var (
		v     sluice.Verdict
		lease *sluice.Lease
	)
	switch {
	case m.shaping:
		var served bool
		if v, served, err = m.wait(ctx, stack, keys, cost); err == nil && !served {
			return // the client went away while it waited
		}
	case m.leases:
		if lease, err = stack.AcquireN(ctx, keys, cost); err == nil {
			v = lease.Verdict
		}
	default:
		v, err = stack.AllowN(ctx, keys, cost)
	}
	switch {
	case errors.Is(err, core.ErrInvalidKey):
		// A key is validated once, where the request is decided: a key
		// function's key the store cannot take is no key.
		m.noKey(w, r, fmt.Errorf("%w: %w", ErrNoKey, err))
		return
	case err != nil:
		m.onError(w, r, fmt.Errorf("httplimit: %w", err))
		return
	}
	if rule := failedClosed(&v); rule >= 0 {
		m.onError(w, r, fmt.Errorf("%w (rule %q)", ErrFailClosed, m.rules[rule].name))
		return
	}
	h := w.Header()
	rules := v.Rules()
	shown := m.shown(&v)
	if shown >= 0 && m.headers != 0 {
		m.setHeaders(h, &m.rules[shown], rules[shown])
	}
	if v.Allowed {
		if lease != nil {
			// Deferred, so that the slots come back when the handler
			// panics too; the panic goes on up the stack. A release that
			// fails (the store is down) leaves the slots to expire with
			// the rule's Period; the store's telemetry records the error.
			defer lease.Release(ctx)
		}
		next.ServeHTTP(w, r)
		return
	}
	dn := Denial{Rule: m.rules[v.Binding].name, Verdict: v, Cost: cost}
	for i, d := range rules {
		if !d.Allowed {
			dn.Violated = append(dn.Violated, m.rules[i].name)
		}
	}
	if !v.Unsatisfiable() {
		wait := v.RetryAfter
		// Never earlier than the RateLimit field's t, and never "retry
		// now": a denial's wait is positive.
		floor := resetSeconds(v.Decision)
		if shown >= 0 {
			floor = max(floor, resetSeconds(rules[shown]))
		}
		if m.shaping {
			// The line was full: a retry is served once it finds a place
			// in it, which comes sooner than the instant t describes, when
			// the request would pass without waiting.
			wait, floor = m.untilPlace(rules), 0
		}
		secs := ceilSeconds(wait)
		if m.jitter > 0 {
			secs = ceilSeconds(wait + min(jitter(m.jitter), math.MaxInt64-wait))
		}
		secs = min(max(secs, floor, 1), int64(math.MaxInt64/time.Second))
		dn.RetryAfter = time.Duration(secs) * time.Second
		h[hRetryAfter] = []string{strconv.FormatInt(secs, 10)}
	}
	m.denied(w, r, dn)
}

// wait reserves cost on every rule's key through stack, within the
// middleware's bounds, and sleeps the reservation's delay. It returns the verdict to answer
// with, served false if ctx ended while it slept: the reservation was then
// cancelled and nothing is to be answered. A refund that could not be
// confirmed goes to the error handler, for the record: its client is gone.
func (m *Middleware) wait(ctx context.Context, stack *sluice.Stack, keys []string, cost int64) (sluice.Verdict, bool, error) {
	r, err := stack.ReserveN(ctx, keys, cost, m.maxDelay)
	if err != nil || !r.Allowed || r.Delay == 0 {
		if err != nil {
			return sluice.Verdict{}, false, err
		}
		return r.Verdict, true, nil
	}
	t := time.NewTimer(r.Delay)
	defer t.Stop()
	select {
	case <-t.C:
		return r.Verdict, true, nil
	case <-ctx.Done():
		if err := r.Cancel(ctx); err != nil {
			return sluice.Verdict{}, false, errors.Join(ctx.Err(), err)
		}
		return sluice.Verdict{}, false, nil
	}
}

// untilPlace returns, for a request a shaping middleware denied, how long
// until the same request would be taken into the line: until every rule
// that denied it would owe no more than the line holds. A rule's decision
// says when the request would pass at once (RetryAfter); it is taken into
// the line that long before, less the line's length in time: the
// queue's tokens at the rule's rate, or the longest delay
// ([WithMaxDelay]), whichever is shorter. The line's length is rounded
// down, so that the wait is never short.
func (m *Middleware) untilPlace(rules []core.Decision) time.Duration {
	var wait time.Duration
	for i, d := range rules {
		if d.Allowed || m.rules[i].limit.IsInf() {
			continue
		}
		line := m.maxDelay.Truncate(time.Microsecond) // the store bounds a debt by whole µs
		if q := m.stack.Queue(); q > 0 {
			line = min(line, queueTime(q, m.rules[i].limit))
		}
		wait = max(wait, d.RetryAfter-line)
	}
	return wait
}

// queueTime returns how long it takes q tokens to accrue under l, rounded
// down to a whole microsecond: q × Period / Rate, in 128 bits since q and
// the period may each be near 2^52.
func queueTime(q int64, l core.Limit) time.Duration {
	hi, lo := bits.Mul64(uint64(q), uint64(l.PeriodMicros()))
	if hi >= uint64(l.Rate()) {
		return math.MaxInt64
	}
	µs, _ := bits.Div64(hi, lo, uint64(l.Rate()))
	if µs > math.MaxInt64/uint64(time.Microsecond) {
		return math.MaxInt64
	}
	return time.Duration(µs) * time.Microsecond
}

// failedClosed returns the index of a rule the stack's failure policy
// denied because the store was down ([core.SourceFailClosed]), or -1.
func failedClosed(v *sluice.Verdict) int {
	if v.Allowed {
		return -1
	}
	for i, d := range v.Rules() {
		if !d.Allowed && d.Source == core.SourceFailClosed {
			return i
		}
	}
	return -1
}

// shown returns the index of the rule the RateLimit field and the other
// header sets describe, or -1 for none: the binding rule, when its
// decision can be described; otherwise, of the rules whose decisions can
// (denials only, after a denial), the one [core.Binding] picks. A rule
// under [core.Inf], and a decision without a capacity (a fail-open one),
// cannot be described.
func (m *Middleware) shown(v *sluice.Verdict) int {
	rules := v.Rules()
	if m.describable(v.Binding, rules[v.Binding]) {
		return v.Binding
	}
	best := -1
	for i, d := range rules {
		if !m.describable(i, d) || !v.Allowed && d.Allowed {
			continue
		}
		if best < 0 || core.Binding([]core.Decision{rules[best], d}) == 1 {
			best = i
		}
	}
	return best
}

// describable reports whether rule i's decision d can be put in headers.
func (m *Middleware) describable(i int, d core.Decision) bool {
	return m.rules[i].item != "" && known(d)
}

// known reports whether d says something a header can carry: a capacity
// that is neither unknown (a fail-open decision carries none) nor
// unlimited.
func known(d core.Decision) bool { return d.Limit > 0 && d.Limit != math.MaxInt64 }

// ceilSeconds returns d in whole seconds, rounded up; 0 for d ≤ 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// policyItem returns a rule's RateLimit-Policy item, "name";q=Q;w=W: Q is
// the limit's capacity (the burst under the bucket algorithms, the rate
// under the window algorithms) and W the seconds it takes to earn Q back
// at the limit's rate, rounded up. It returns "" for [core.Inf].
func policyItem(quoted string, alg core.Algorithm, l core.Limit) string {
	if l.IsInf() {
		return ""
	}
	q := capacity(alg, l)
	// W = ⌈q × period / rate⌉ seconds, in 128 bits: q and period may each
	// be near 2^52.
	hi, lo := bits.Mul64(uint64(q), uint64(l.PeriodMicros()))
	wµs := uint64(1<<63 - 1)
	if hi < uint64(l.Rate()) {
		quo, rem := bits.Div64(hi, lo, uint64(l.Rate()))
		if rem != 0 {
			quo++
		}
		wµs = min(quo, wµs)
	}
	w := max(ceilSeconds(time.Duration(min(wµs, uint64(core.MaxExact)))*time.Microsecond), 1)
	b := append([]byte(quoted), ";q="...)
	b = strconv.AppendInt(b, sfInt(q), 10)
	b = append(b, ";w="...)
	b = strconv.AppendInt(b, sfInt(w), 10)
	return string(b)
}

// probeInstant is the instant capacity asks an algorithm about, in µs
// since the Unix epoch (2001-09-09): any instant would do for a fresh key.
const probeInstant = 1e15

// capacity returns the largest cost alg admits at once under l, as the
// algorithm reports it in [core.Decision].Limit: the burst for the bucket
// algorithms, the rate for the window algorithms and the slots of the
// concurrency algorithm. It asks the algorithm about a fresh state, a
// pure computation that touches no store; an algorithm that will not say
// is taken to admit its burst.
func capacity(alg core.Algorithm, l core.Limit) (q int64) {
	defer func() {
		if recover() != nil || q <= 0 {
			q = l.Burst()
		}
	}()
	var s core.State
	return alg.Transition(&s, core.Step{Now: probeInstant, Limit: l, Op: core.OpPeek}).Limit
}

// sfMax is the largest Integer a structured field carries (RFC 9651
// §3.3.1: at most 15 digits).
const sfMax = 999_999_999_999_999

// sfInt clamps v to a structured field Integer's non-negative range.
func sfInt(v int64) int64 { return min(max(v, 0), sfMax) }
