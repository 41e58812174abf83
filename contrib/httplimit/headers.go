package httplimit

import (
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
)

// Headers selects the rate-limit header fields a [Middleware] sends. The
// sets may be combined with |, except [HeadersX] with [HeadersXEpoch].
type Headers uint8

// The header sets. Each describes one rule's decision, the binding rule's
// ([sluice.Verdict].Binding): after a denial, the denying rule with the
// longest wait; when every rule admitted, the one closest to exhaustion.
// Only [HeadersDraft] also lists every rule, as a policy. A rule whose
// limit is [sluice.Inf] is never described, nor a decision that carries no
// capacity (a fail-open one).
const (
	// HeadersNone sends no rate-limit header. Retry-After is still sent
	// on 429s.
	HeadersNone Headers = 0
	// HeadersDraft sends the IETF fields of
	// draft-ietf-httpapi-ratelimit-headers-10, structured field Lists:
	//
	//	RateLimit-Policy: "per-user";q=50;w=5, "global";q=1000;w=60
	//	RateLimit: "per-user";r=49;t=1
	//
	// RateLimit-Policy has an item per rule, named after it: q is the
	// rule's capacity (see the package documentation), w the seconds it
	// takes to earn it back. RateLimit has the binding rule's: r is what
	// remains, t the seconds until more is available. The default.
	HeadersDraft Headers = 1 << (iota - 1)
	// HeadersLegacy sends the fields of the earlier drafts (-00 to -06),
	// which Kong and Envoy send: RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset, plain integers, Reset in seconds from now.
	HeadersLegacy
	// HeadersX sends X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset, Reset in seconds from now, as HeadersLegacy does.
	HeadersX
	// HeadersXEpoch sends the X-RateLimit fields with X-RateLimit-Reset in
	// Unix seconds, as GitHub does: the instant, rounded up, at which
	// HeadersX's Reset would have elapsed.
	HeadersXEpoch

	headersAll = HeadersDraft | HeadersLegacy | HeadersX | HeadersXEpoch
)

// Header names as net/http keeps them ([http.CanonicalHeaderKey]); header
// names are case-insensitive, so "Ratelimit" is the draft's "RateLimit".
const (
	hPolicy     = "Ratelimit-Policy"
	hRateLimit  = "Ratelimit"
	hLimit      = "Ratelimit-Limit"
	hRemaining  = "Ratelimit-Remaining"
	hReset      = "Ratelimit-Reset"
	hXLimit     = "X-Ratelimit-Limit"
	hXRemaining = "X-Ratelimit-Remaining"
	hXReset     = "X-Ratelimit-Reset"
	hRetryAfter = "Retry-After"
)

// setHeaders sets the selected rate-limit fields for rule p's decision d. The
// draft's fields are Lists, which may be split over several field lines,
// so they are added to any a handler earlier in the chain set; the others
// hold one value and are replaced.
func (m *Middleware) setHeaders(h http.Header, p *rule, d sluice.Decision) {
	r := sfInt(d.Remaining)
	t := resetSeconds(d)
	if m.headers&HeadersDraft != 0 {
		h[hPolicy] = append(h[hPolicy], m.policyH)
		var buf [96]byte
		b := append(buf[:0], p.quoted...)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, r, 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, t, 10)
		h[hRateLimit] = append(h[hRateLimit], string(b))
	}
	if m.headers&(HeadersLegacy|HeadersX|HeadersXEpoch) == 0 {
		return
	}
	limit := strconv.FormatInt(sfInt(d.Limit), 10)
	remaining := strconv.FormatInt(r, 10) // small numbers cost no allocation
	reset := strconv.FormatInt(t, 10)
	if m.headers&HeadersLegacy != 0 {
		h[hLimit] = []string{limit}
		h[hRemaining] = []string{remaining}
		h[hReset] = []string{reset}
	}
	if m.headers&(HeadersX|HeadersXEpoch) != 0 {
		h[hXLimit] = []string{limit}
		h[hXRemaining] = []string{remaining}
		if m.headers&HeadersXEpoch != 0 {
			at := m.now().Add(waitOf(d))
			secs := at.Unix()
			if at.Nanosecond() != 0 {
				secs++
			}
			reset = strconv.FormatInt(secs, 10)
		}
		h[hXReset] = []string{reset}
	}
}

// waitOf returns the wait the reset fields describe: after a denial that
// can be retried, until the request would pass; otherwise until the key
// is back to full capacity.
func waitOf(d sluice.Decision) time.Duration {
	if d.RetryAfter > 0 && d.RetryAfter != sluice.RetryNever {
		return d.RetryAfter
	}
	return d.ResetAfter
}

// resetSeconds returns waitOf(d) in whole seconds, rounded up so that a
// client never comes back early, and clamped to a structured field
// Integer. A 429's Retry-After is never less, but a shaping
// middleware's, which says when a place in the line frees (untilPlace).
func resetSeconds(d sluice.Decision) int64 { return sfInt(ceilSeconds(waitOf(d))) }

// jitter returns a random delay from 0 to max inclusive.
func jitter(max time.Duration) time.Duration {
	if max >= math.MaxInt64-1 {
		return time.Duration(rand.Int64N(math.MaxInt64))
	}
	return time.Duration(rand.Int64N(int64(max) + 1))
}
