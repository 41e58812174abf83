package limits

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/sluicehq/sluice/stores"
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

// keyParts escapes a key's domain, entry keys and values, so that '|',
// '=' and '#' can separate them.
var keyParts = stores.NewEscaper("|=#")

// stateKey is Key, each entry's value replaced by steps[i].share where
// there is one.
func stateKey(domain string, entries []Entry, steps []step) string {
	n := keyParts.Len(domain)
	for i := range entries {
		n += 2 + keyParts.Len(entries[i].Key) + keyParts.Len(value(entries, steps, i))
	}
	if n <= MaxKeyLen {
		var buf [MaxKeyLen]byte
		return string(appendKey(buf[:0], domain, entries, steps))
	}
	var stack [1024]byte
	full := stack[:0]
	if n > len(stack) {
		full = make([]byte, 0, n)
	}
	sum := sha256.Sum256(appendKey(full, domain, entries, steps))
	var buf [MaxKeyLen]byte
	b := buf[:0]
	if keyParts.Len(domain) <= 128 {
		b = keyParts.Append(b, domain)
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
	b = keyParts.Append(b, domain)
	for i := range entries {
		b = append(b, '|')
		b = keyParts.Append(b, entries[i].Key)
		b = append(b, '=')
		b = keyParts.Append(b, value(entries, steps, i))
	}
	return b
}
