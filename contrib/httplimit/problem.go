package httplimit

import (
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/sluicehq/sluice/core"
)

// ProblemQuotaExceeded is the problem type of the default 429's body,
// registered by draft-ietf-httpapi-ratelimit-headers-10 (§5.1) with its
// "violated-policies" member, the names of the policies that denied.
const ProblemQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// ContentTypeProblem is the media type of an RFC 9457 problem details
// body in JSON.
const ContentTypeProblem = "application/problem+json"

// WriteDenied is the default [DeniedFunc]. It answers 429 Too Many
// Requests with an RFC 9457 problem details body whose detail names the
// binding rule and whose violated-policies lists every rule that denied:
//
//	{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",
//	 "title":"Quota Exceeded","status":429,
//	 "detail":"Rate limit \"per-day\" exceeded: retry in 3600 s.",
//	 "violated-policies":["per-user","per-day"]}
//
// When the request costs more than the binding rule ever admits at once,
// the detail says it will never be admitted (and no Retry-After is sent);
// when a deny list refused it ([core.SourceDenyList]), that it is not
// admitted.
func WriteDenied(w http.ResponseWriter, r *http.Request, d Denial) {
	var buf [512]byte
	b := append(buf[:0], `{"type":"`+ProblemQuotaExceeded+`","title":"Quota Exceeded","status":429,"detail":`...)
	var detail [256]byte
	db := append(detail[:0], "Rate limit "...)
	db = strconv.AppendQuote(db, d.Rule) // printable ASCII: JSON-safe once escaped again below
	switch {
	case d.Verdict.Source == core.SourceDenyList:
		db = append(db, " does not admit this client."...)
	case d.Verdict.Unsatisfiable():
		db = append(db, " admits at most "...)
		db = strconv.AppendInt(db, d.Verdict.Limit, 10)
		db = append(db, " at once; this request costs "...)
		db = strconv.AppendInt(db, d.Cost, 10)
		db = append(db, " and will never be admitted."...)
	default:
		db = append(db, " exceeded: retry in "...)
		db = strconv.AppendInt(db, ceilSeconds(d.RetryAfter), 10)
		db = append(db, " s."...)
	}
	b = appendJSONString(b, string(db))
	b = append(b, `,"violated-policies":[`...)
	for i, name := range d.Violated {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, name)
	}
	b = append(b, "]}\n"...)
	writeProblem(w, http.StatusTooManyRequests, b)
}

// WriteUnavailable is the default error handler ([WithErrorHandler]). It
// answers 503 Service Unavailable with an RFC 9457 problem details body
// of type "about:blank"; the error is not shown to the client, who can do
// nothing with it: log it in a handler of your own, then call this one.
//
//	{"type":"about:blank","title":"Service Unavailable","status":503,
//	 "detail":"The rate limiter cannot decide now: its store is unavailable."}
func WriteUnavailable(w http.ResponseWriter, r *http.Request, err error) {
	writeProblem(w, http.StatusServiceUnavailable, []byte(`{"type":"about:blank","title":"Service Unavailable","status":503,`+
		`"detail":"The rate limiter cannot decide now: its store is unavailable."}`+"\n"))
}

// WriteNoKey is the default no-key handler ([WithNoKeyHandler]). It
// answers 400 Bad Request with an RFC 9457 problem details body of type
// "about:blank":
//
//	{"type":"about:blank","title":"Bad Request","status":400,
//	 "detail":"The request carries nothing to rate-limit it by."}
func WriteNoKey(w http.ResponseWriter, r *http.Request, err error) {
	writeProblem(w, http.StatusBadRequest, []byte(`{"type":"about:blank","title":"Bad Request","status":400,`+
		`"detail":"The request carries nothing to rate-limit it by."}`+"\n"))
}

// writeProblem writes a problem details response.
func writeProblem(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h["Content-Type"] = []string{ContentTypeProblem}
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	w.WriteHeader(status)
	w.Write(body)
}

// appendJSONString appends s to b as a JSON string. Invalid UTF-8 becomes
// U+FFFD, as encoding/json does.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return append(b, '"')
}
