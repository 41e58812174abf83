package stores

// Escaper percent-escapes strings that a store joins into one key: '%' and
// each byte of its set are written as %XX (two capital hex digits), so
// that those bytes can separate the parts of a key and no part can hold
// one. The Redis stores escape a user's key with the set "{}", so that it
// cannot choose its Redis Cluster hash tag; sluice-serve escapes a
// descriptor's parts with "|=#". The zero Escaper escapes '%' alone. An
// Escaper is safe for concurrent use.
type Escaper struct {
	set [256]bool
}

// NewEscaper returns an Escaper of '%' and the bytes of set.
func NewEscaper(set string) *Escaper {
	e := &Escaper{}
	e.set['%'] = true
	for i := 0; i < len(set); i++ {
		e.set[set[i]] = true
	}
	return e
}

// Len returns the length of s escaped, in bytes.
func (e *Escaper) Len(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		if e.set[s[i]] || s[i] == '%' {
			n += 2
		}
	}
	return n
}

// Append appends s escaped to dst and returns the extended slice.
func (e *Escaper) Append(dst []byte, s string) []byte {
	const digits = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		if c := s[i]; e.set[c] || c == '%' {
			dst = append(dst, '%', digits[c>>4], digits[c&15])
		} else {
			dst = append(dst, c)
		}
	}
	return dst
}
