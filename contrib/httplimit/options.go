package httplimit

import (
	"net/http"
	"net/netip"
	"strings"
	"time"
)

// Option configures a [Middleware]. Options are made by the With
// functions of this package.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// ruleKey is a key function given to one rule by [WithKey].
type ruleKey struct {
	rule string
	key  KeyFunc
}

type config struct {
	keys               []ruleKey // WithKey, in the order given
	ip                 IPConfig
	v4, v6             int  // WithIPv4Prefix, WithIPv6Prefix
	v4set              bool // so that an explicit 0 is reported, not taken as the default
	v6set              bool
	queueSet, delaySet bool // WithQueue, WithMaxDelay given
	nowSet             bool // WithNow given
	settings
}

// settings are the options a [Middleware] keeps as they were given (or
// defaulted by [New]).
type settings struct {
	key      KeyFunc // the default key function
	cost     CostFunc
	headers  Headers
	jitter   time.Duration
	denied   DeniedFunc
	onError  ErrorFunc
	noKey    ErrorFunc
	now      func() time.Time // WithNow; time.Now if not given
	at       bool             // WithNow given: decide at now()
	queue    int64            // WithQueue; 0: none
	maxDelay time.Duration    // WithMaxDelay; 0: none
}

// WithKey sets how a request's key is found for the stack's rule named
// rule: per user from an API key ([HeaderKey]) or an identity
// ([IdentityKey]), per tenant from a header, one key for everyone
// ([GlobalKey]). A rule without WithKey is keyed by the default key
// function ([WithKeyFunc]). [New] reports a rule the stack lacks, a rule
// given two key functions, and a nil f.
func WithKey(rule string, f KeyFunc) Option {
	return optionFunc(func(c *config) { c.keys = append(c.keys, ruleKey{rule, f}) })
}

// WithKeyFunc sets the default key function, which keys every rule not
// given one by [WithKey]. The default is the client's address, as
// configured by [WithTrustedProxies], [WithForwardedHeader],
// [WithIPv4Prefix] and [WithIPv6Prefix] (see [ClientIP.Key]); those
// options do nothing to a KeyFunc given here, which can make its own
// [ClientIP] with [NewClientIP].
func WithKeyFunc(f KeyFunc) Option {
	return optionFunc(func(c *config) { c.key = f })
}

// WithTrustedProxies sets the address ranges of the reverse proxies in
// front of the server, whose forwarding headers the default key function
// believes (see [IPConfig].TrustedProxies). The default is none: every
// forwarding header is ignored.
func WithTrustedProxies(prefixes []netip.Prefix) Option {
	prefixes = append([]netip.Prefix(nil), prefixes...)
	return optionFunc(func(c *config) { c.ip.TrustedProxies = prefixes })
}

// WithForwardedHeader sets the forwarding header the trusted proxies
// append to: [HeaderXForwardedFor] (the default) or [HeaderForwarded].
func WithForwardedHeader(name string) Option {
	return optionFunc(func(c *config) { c.ip.Header = name })
}

// WithIPv4Prefix sets the prefix length, 1 to 32, IPv4 clients are keyed
// by. The default is 32: each address is its own key.
func WithIPv4Prefix(bits int) Option {
	return optionFunc(func(c *config) { c.v4, c.v4set = bits, true })
}

// WithIPv6Prefix sets the prefix length, 1 to 128, IPv6 clients are keyed
// by. The default is 64, the block one host is usually given.
func WithIPv6Prefix(bits int) Option {
	return optionFunc(func(c *config) { c.v6, c.v6set = bits, true })
}

// CostFunc returns how much of the limit a request uses, under every rule
// of the stack: 1 for a plain request, more for an expensive one, 0 for
// one that is free (it is admitted, charged nothing, and still gets
// headers). A cost below zero or above [core.MaxUnits] is a bug: the
// request is answered by the error handler with an error wrapping
// [core.ErrInvalidCost].
type CostFunc func(r *http.Request) int64

// WithCost sets the cost of each request. The default charges 1.
func WithCost(f CostFunc) Option {
	return optionFunc(func(c *config) { c.cost = f })
}

// CostByMethod returns a [CostFunc] that charges costs[r.Method], or def
// for a method not in costs; for instance
// CostByMethod(map[string]int64{"GET": 1, "HEAD": 0}, 5).
func CostByMethod(costs map[string]int64, def int64) CostFunc {
	m := make(map[string]int64, len(costs))
	for k, v := range costs {
		m[strings.ToUpper(k)] = v
	}
	return func(r *http.Request) int64 {
		if v, ok := m[r.Method]; ok {
			return v
		}
		return def
	}
}

// WithHeaders selects the rate-limit header fields sent with every
// decided response, allowed or denied. The default is [HeadersDraft]; 0
// ([HeadersNone]) sends none. Retry-After is sent on every 429 whatever
// is chosen here.
func WithHeaders(h Headers) Option {
	return optionFunc(func(c *config) { c.headers = h })
}

// WithRetryJitter adds a random delay of up to max to Retry-After on
// 429s, so that clients denied together do not all come back at the same
// second. The jitter only ever adds: Retry-After is never earlier than the
// instant the request would pass, nor than the RateLimit field's t. The
// default is none.
func WithRetryJitter(max time.Duration) Option {
	return optionFunc(func(c *config) { c.jitter = max })
}

// WithDeniedHandler sets what answers a denied request. The rate-limit
// headers and Retry-After are already set on w when f is called; f writes
// the status and body. The default is [WriteDenied]: 429 with a problem
// details body.
func WithDeniedHandler(f DeniedFunc) Option {
	return optionFunc(func(c *config) { c.denied = f })
}

// WithErrorHandler sets what answers a request no decision could be made
// for: the store failed (err wraps the store's error), the stack's
// failure policy failed closed (err wraps [ErrFailClosed]), or the cost
// was invalid (err wraps [core.ErrInvalidCost]). The default is
// [WriteUnavailable]: 503 with a problem details body. It is never
// called for a denial.
func WithErrorHandler(f ErrorFunc) Option {
	return optionFunc(func(c *config) { c.onError = f })
}

// WithNoKeyHandler sets what answers a request a key function found no
// key for (err wraps [ErrNoKey] and names the rule). The default is
// [WriteNoKey]: 400 with a problem details body. Passing such requests
// through unlimited would let any client escape the limit by hiding its
// key; to charge them to a key of their own, use [FirstKey] with a last
// key function that always finds one.
func WithNoKeyHandler(f ErrorFunc) Option {
	return optionFunc(func(c *config) { c.noKey = f })
}

// WithNow makes the middleware decide each request at the instant now
// returns, through sluice.Stack.At, instead of on the store's clock, and
// read the epoch seconds of [HeadersXEpoch] from it: a test steps a clock
// of its own and asserts at exact instants, on any store (see
// docs/testing.md). A shaping middleware ([WithQueue], [WithMaxDelay])
// still sleeps a reservation's delay on a timer: in a test, run it in a
// testing/synctest bubble. The default decides on the store's clock, and
// reads the epoch from [time.Now]. Deciding each request at now costs an
// allocation; it is meant for tests and replays, not for a fleet, whose
// instances' clocks disagree where the store's does not. [New] fails for
// a nil now.
func WithNow(now func() time.Time) Option {
	return optionFunc(func(c *config) { c.now, c.nowSet = now, true })
}

// WithQueue makes the middleware shape traffic rather than only limit it:
// a request the stack cannot admit at once waits in line for its turn,
// and is served when it comes, if at most n requests' costs wait on each
// rule's key (see sluice.Stack.WithQueue); the request beyond is denied
// at once with 429 and a Retry-After of the whole seconds until a place
// in the line frees, at least 1 (see [Denial].RetryAfter). The line is
// the keys' debt in the store, so n holds across every instance sharing
// it. A waiting request whose client goes away gives its place back, and
// nothing is written for it. Combined with
// [WithMaxDelay], a request waits only if both bounds allow it. It is
// nginx's limit_req burst (docs/shaping.md). [New] fails for n < 1, and
// for a stack whose rules cannot reserve (the window algorithms,
// concurrency). The default is no waiting: every request is decided at
// once.
func WithQueue(n int64) Option {
	return optionFunc(func(c *config) { c.queue, c.queueSet = n, true })
}

// WithMaxDelay makes the middleware shape traffic, as [WithQueue] does,
// with requests waiting at most d for their turn; a request that would
// wait longer is denied at once with 429 and a Retry-After of the whole
// seconds until it would wait at most d, at least 1. [New] fails for
// d ≤ 0. The default is no waiting.
func WithMaxDelay(d time.Duration) Option {
	return optionFunc(func(c *config) { c.maxDelay, c.delaySet = d, true })
}
