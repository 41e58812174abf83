package httplimit

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/core"
)

// ErrFailClosed is what the error handler is given when a limiter's
// failure policy answered fail-closed ([core.SourceFailClosed]): the store
// is down and the policy chose to deny rather than guess.
var ErrFailClosed = errors.New("httplimit: store unavailable, failing closed")

// DeniedFunc answers a request a limiter denied. See [WithDeniedHandler].
type DeniedFunc func(w http.ResponseWriter, r *http.Request, d Denial)

// ErrorFunc answers a request the middleware could not decide. See
// [WithErrorHandler] and [WithNoKeyHandler].
type ErrorFunc func(w http.ResponseWriter, r *http.Request, err error)

// Denial describes a denied request to a [DeniedFunc].
type Denial struct {
	// Policy is the name of the policy whose limiter denied.
	Policy string
	// Decision is that limiter's decision.
	Decision core.Decision
	// Cost is what the request would have cost.
	Cost int64
	// RetryAfter is the delay sent in the Retry-After header: the
	// decision's RetryAfter rounded up to whole seconds, plus any jitter.
	// It is zero when the request can never be admitted
	// ([core.Decision.Unsatisfiable]); no Retry-After is sent then.
	RetryAfter time.Duration
}

// policy is one limiter of a middleware.
type policy struct {
	name   string
	lim    *core.Limiter
	quoted string // name as a structured field String
	item   string // the RateLimit-Policy item; "" for an Inf limit
}

// Middleware limits the requests an [http.Handler] serves. Make one with
// [New] and wrap handlers with [Middleware.Handler]. It is safe for
// concurrent use.
type Middleware struct {
	policies []policy
	policyH  string // RateLimit-Policy: every policy's item
	settings
}

// New returns a middleware that charges each request to lim, and to the
// limiters of [WithLimiter] options after it. It reports a nil limiter, a
// bad policy name, and a bad key configuration (a prefix length out of
// range, an invalid trusted proxy prefix, an unknown forwarding header or
// header set).
func New(lim *core.Limiter, opts ...Option) (*Middleware, error) {
	c := config{name: "default", settings: settings{headers: HeadersDraft}}
	for _, o := range opts {
		o.apply(&c)
	}
	m := &Middleware{settings: c.settings}
	switch {
	case c.headers&^headersAll != 0:
		return nil, fmt.Errorf("httplimit: unknown header set %#x", uint8(c.headers))
	case c.headers&HeadersX != 0 && c.headers&HeadersXEpoch != 0:
		return nil, errors.New("httplimit: HeadersX and HeadersXEpoch both set X-RateLimit-Reset; choose one")
	case c.jitter < 0:
		return nil, fmt.Errorf("httplimit: negative retry jitter %v", c.jitter)
	case c.v4set && (c.v4 < 1 || c.v4 > 32):
		return nil, fmt.Errorf("httplimit: IPv4 prefix length %d is outside 1 to 32", c.v4)
	case c.v6set && (c.v6 < 1 || c.v6 > 128):
		return nil, fmt.Errorf("httplimit: IPv6 prefix length %d is outside 1 to 128", c.v6)
	}
	c.ip.IPv4Prefix, c.ip.IPv6Prefix = c.v4, c.v6
	ip, err := NewClientIP(c.ip)
	if err != nil {
		return nil, err
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
	all := append([]namedLimiter{{c.name, lim}}, c.more...)
	for _, nl := range all {
		if nl.lim == nil {
			return nil, fmt.Errorf("httplimit: policy %q has a nil limiter", nl.name)
		}
		if err := validName(nl.name); err != nil {
			return nil, err
		}
		for _, p := range m.policies {
			if p.name == nl.name {
				return nil, fmt.Errorf("httplimit: two policies named %q", nl.name)
			}
		}
		p := policy{name: nl.name, lim: nl.lim, quoted: strconv.Quote(nl.name)}
		if item := policyItem(p.quoted, nl.lim); item != "" {
			p.item = item
			if m.policyH != "" {
				m.policyH += ", "
			}
			m.policyH += item
		}
		m.policies = append(m.policies, p)
	}
	return m, nil
}

// validName reports a policy name that cannot be sent as a structured
// field String: empty, longer than 64 bytes, or with a byte outside
// printable ASCII. Such a name, quoted by [strconv.Quote], is exactly its
// sf-string serialization: only '"' and '\' are escaped, with a
// backslash.
func validName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("httplimit: policy name %q must be 1 to 64 characters", name)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("httplimit: policy name %q has a byte (%#x) outside printable ASCII", name, c)
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

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	key, err := m.key(r)
	if err == nil {
		if err = core.ValidateKey(key); err != nil {
			err = fmt.Errorf("%w: %w", ErrNoKey, err)
		}
	}
	if err != nil {
		if m.shadow {
			next.ServeHTTP(w, r)
			return
		}
		m.noKey(w, r, err)
		return
	}
	cost := int64(1)
	if m.cost != nil {
		cost = m.cost(r)
	}
	if cost < 0 || cost > core.MaxUnits {
		m.fail(w, r, next, fmt.Errorf("httplimit: cost function: %w: %d", core.ErrInvalidCost, cost))
		return
	}
	var (
		shown  = -1 // the policy whose decision the headers describe
		show   core.Decision
		denied bool
	)
	ctx := r.Context()
	for i := range m.policies {
		p := &m.policies[i]
		d, err := p.lim.AllowN(ctx, key, cost)
		if err != nil {
			if m.failOpen {
				continue
			}
			m.fail(w, r, next, fmt.Errorf("httplimit: policy %q: %w", p.name, err))
			return
		}
		if !d.Allowed && d.Source == core.SourceFailClosed {
			m.fail(w, r, next, fmt.Errorf("%w (policy %q)", ErrFailClosed, p.name))
			return
		}
		if !d.Allowed {
			shown, show, denied = i, d, true
			break
		}
		if p.item != "" && known(d) && (shown < 0 || closer(d, show)) {
			shown, show = i, d
		}
	}
	h := w.Header()
	if shown >= 0 && m.headers != 0 && m.policies[shown].item != "" {
		m.setHeaders(h, &m.policies[shown], show)
	}
	if !denied || m.shadow {
		next.ServeHTTP(w, r)
		return
	}
	dn := Denial{Policy: m.policies[shown].name, Decision: show, Cost: cost}
	if !show.Unsatisfiable() {
		secs := ceilSeconds(show.RetryAfter)
		if m.jitter > 0 {
			secs = ceilSeconds(show.RetryAfter + min(jitter(m.jitter), math.MaxInt64-show.RetryAfter))
		}
		// Never earlier than the RateLimit field's t, and never "retry
		// now": a denial's wait is positive.
		secs = min(max(secs, resetSeconds(show), 1), int64(math.MaxInt64/time.Second))
		dn.RetryAfter = time.Duration(secs) * time.Second
		h[hRetryAfter] = []string{strconv.FormatInt(secs, 10)}
	}
	m.denied(w, r, dn)
}

// fail answers a request no decision could be made for.
func (m *Middleware) fail(w http.ResponseWriter, r *http.Request, next http.Handler, err error) {
	if m.shadow {
		next.ServeHTTP(w, r)
		return
	}
	m.onError(w, r, err)
}

// known reports whether d says something a header can carry: a capacity
// that is neither unknown (a fail-open decision may carry none) nor
// unlimited.
func known(d core.Decision) bool { return d.Limit > 0 && d.Limit != math.MaxInt64 }

// closer reports whether d is closer to exhaustion than e: less
// remaining, or as much but for longer.
func closer(d, e core.Decision) bool {
	if d.Remaining != e.Remaining {
		return d.Remaining < e.Remaining
	}
	return resetSeconds(d) > resetSeconds(e)
}

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

// policyItem returns lim's RateLimit-Policy item, "name";q=Q;w=W: Q is
// the limit's capacity (the burst under the bucket algorithms, the rate
// under the window algorithms) and W the seconds it takes to earn Q back
// at the limit's rate, rounded up. It returns "" for [core.Inf].
func policyItem(quoted string, lim *core.Limiter) string {
	l := lim.Limit()
	if l.IsInf() {
		return ""
	}
	q := capacity(lim)
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

// capacity returns the largest cost lim admits at once, as its algorithm
// reports it in [core.Decision].Limit: the burst for the bucket
// algorithms, the rate for the window algorithms. It asks the algorithm
// about a fresh state, a pure computation that touches no store; an
// algorithm that will not say is taken to admit its burst.
func capacity(lim *core.Limiter) (q int64) {
	l := lim.Limit()
	defer func() {
		if recover() != nil || q <= 0 {
			q = l.Burst()
		}
	}()
	var s core.State
	return lim.Algorithm().Transition(&s, core.Step{Now: probeInstant, Limit: l, Op: core.OpPeek}).Limit
}

// sfMax is the largest Integer a structured field carries (RFC 9651
// §3.3.1: at most 15 digits).
const sfMax = 999_999_999_999_999

// sfInt clamps v to a structured field Integer's non-negative range.
func sfInt(v int64) int64 { return min(max(v, 0), sfMax) }
