package limits

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// MaxKeyLen is the longest key, in bytes, [Key] returns: a key that would
// be longer is hashed. It is well under the longest key a store accepts,
// [github.com/sluicehq/sluice/core.MaxKeyLen].
const MaxKeyLen = 256

// Key returns the state key for a request descriptor of domain: the
// domain, then each entry as "|key=value", with every '%', '|', '=' and
// '#' in the domain, keys and values written as %25, %7C, %3D and %23, so
// that no two descriptors share a key:
//
//	Key("api", []Entry{{"user", "alice"}, {"path", "/a|b"}}) == "api|user=alice|path=/a%7Cb"
//
// A key longer than [MaxKeyLen] becomes the escaped domain, "|#" and the
// SHA-256 of the whole key in lowercase hex ("api|#3f1c…", 64 digits),
// or, if the escaped domain is longer than 128 bytes, "#" and the hash
// alone; no unhashed key has "#" there. So no request can make a key
// longer than MaxKeyLen, whatever its entries. Key is non-empty whenever
// domain is.
//
// [Set.Match] returns Key of the request, except that an entry matched by
// a wildcard with share_threshold has the wildcard's pattern in place of
// its value.
func Key(domain string, entries []Entry) string { return stateKey(domain, entries, nil) }

// stateKey is Key, each entry's value replaced by steps[i].share where
// there is one.
func stateKey(domain string, entries []Entry, steps []step) string {
	n := escapedLen(domain)
	for i := range entries {
		n += 2 + escapedLen(entries[i].Key) + escapedLen(value(entries, steps, i))
	}
	if n <= MaxKeyLen {
		var b strings.Builder
		b.Grow(n)
		writeEscaped(&b, domain)
		for i := range entries {
			b.WriteByte('|')
			writeEscaped(&b, entries[i].Key)
			b.WriteByte('=')
			writeEscaped(&b, value(entries, steps, i))
		}
		return b.String()
	}
	var stack [1024]byte
	full := stack[:0]
	if n > len(stack) {
		full = make([]byte, 0, n)
	}
	sum := sha256.Sum256(appendKey(full, domain, entries, steps))
	var buf [MaxKeyLen]byte
	b := buf[:0]
	if d := escapedLen(domain); d <= 128 {
		b = appendEscaped(b, domain)
		b = append(b, '|')
	}
	b = append(b, '#')
	b = hex.AppendEncode(b, sum[:])
	return string(b)
}

// value returns the value entry i stands for in a key.
func value(entries []Entry, steps []step, i int) string {
	if i < len(steps) {
		if p := steps[i].share(entries[i]); p != "" {
			return p
		}
	}
	return entries[i].Value
}

// appendKey appends the unhashed key to b.
func appendKey(b []byte, domain string, entries []Entry, steps []step) []byte {
	b = appendEscaped(b, domain)
	for i := range entries {
		b = append(b, '|')
		b = appendEscaped(b, entries[i].Key)
		b = append(b, '=')
		b = appendEscaped(b, value(entries, steps, i))
	}
	return b
}

// escaped reports whether c is written as %XX in a key.
func escaped(c byte) bool { return c == '%' || c == '|' || c == '=' || c == '#' }

// escapedLen returns the length of s escaped.
func escapedLen(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		if escaped(s[i]) {
			n += 2
		}
	}
	return n
}

// writeEscaped writes s to b, escaped.
func writeEscaped(b *strings.Builder, s string) {
	for len(s) > 0 {
		i := 0
		for i < len(s) && !escaped(s[i]) {
			i++
		}
		b.WriteString(s[:i])
		if i == len(s) {
			return
		}
		b.WriteString(escape(s[i]))
		s = s[i+1:]
	}
}

// escape returns the escape of c, a byte that is escaped.
func escape(c byte) string {
	switch c {
	case '%':
		return "%25"
	case '|':
		return "%7C"
	case '=':
		return "%3D"
	}
	return "%23"
}

// appendEscaped appends s to b, escaped.
func appendEscaped(b []byte, s string) []byte {
	const digits = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if escaped(c) {
			b = append(b, '%', digits[c>>4], digits[c&15])
			continue
		}
		b = append(b, c)
	}
	return b
}
