package httplimit

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/core"
)

// ErrNoKey reports a request from which a [KeyFunc] could not take a key:
// a missing header, an unknown identity, a remote address that is not an
// IP address. The middleware answers such a request with its no-key
// handler (see [WithNoKeyHandler]); it never lets it through unlimited.
var ErrNoKey = errors.New("httplimit: request has no rate-limit key")

// KeyFunc returns the key a request is charged to under one rule. It
// returns an error wrapping [ErrNoKey] when the request carries no usable
// key. A key must be 1 to [core.MaxKeyLen] bytes; the middleware treats
// any other key as missing.
//
// Each rule of a stack keeps its state apart from every other rule's, so
// keys need only be distinct within a rule. A rule keyed by a
// [FirstKey] chain still mixes kinds: the key functions of this package
// prefix their keys with their kind ("ip:", the header's name, "id:"), so
// that two kinds never collide.
type KeyFunc func(r *http.Request) (string, error)

// GlobalKey is a [KeyFunc] that keys every request alike, with the key
// "global": for a rule that limits the whole service (or everything one
// middleware serves) together, such as
//
//	httplimit.WithKey("global", httplimit.GlobalKey)
//
// Two middlewares whose stacks share a rule of the same name, algorithm
// and store, both keyed by GlobalKey, share its budget.
func GlobalKey(*http.Request) (string, error) { return "global", nil }

// Forwarding headers [IPConfig].Header may name.
const (
	HeaderXForwardedFor = "X-Forwarded-For"
	HeaderForwarded     = "Forwarded" // RFC 7239
)

// IPConfig configures a [ClientIP]. The zero IPConfig trusts no proxy and
// keys IPv6 clients by their /64.
type IPConfig struct {
	// TrustedProxies are the address ranges of the reverse proxies in
	// front of the server. A request whose remote address is in one of
	// them has its forwarding header walked from right to left, past every
	// trusted address, to the first untrusted one: that is the client.
	// The default, none, means the forwarding header is ignored and the
	// remote address is the client, so a client cannot choose its key by
	// sending the header itself. IPv4-mapped IPv6 prefixes
	// (::ffff:10.0.0.0/104) are taken as the IPv4 prefixes they map.
	TrustedProxies []netip.Prefix
	// Header is the forwarding header the trusted proxies append to:
	// [HeaderXForwardedFor] (the default) or [HeaderForwarded]. Only one
	// is read: a client could send the other, and the proxies would pass
	// it on untouched.
	Header string
	// IPv4Prefix is the length, in bits, of the prefix an IPv4 client is
	// keyed by: 32 (the default) keys each address on its own, 24 keys a
	// whole /24 together.
	IPv4Prefix int
	// IPv6Prefix is the length, in bits, of the prefix an IPv6 client is
	// keyed by. The default is 64: a single host is usually given a whole
	// /64, so keying by address would let it pick from 2^64 keys.
	IPv6Prefix int
}

// ClientIP finds a request's client address, walking a forwarding header
// through trusted proxies, and keys it by its network prefix. Make one
// with [NewClientIP]; it is safe for concurrent use.
//
// Before anything else an address is unmapped (::ffff:1.2.3.4 is the IPv4
// address 1.2.3.4) and its zone dropped, so an IPv4 client reached over
// an IPv6 socket is keyed as IPv4, never masked into one IPv6 prefix with
// every other IPv4 client.
type ClientIP struct {
	trusted   []netip.Prefix
	forwarded bool // the header is Forwarded, not X-Forwarded-For
	header    string
	v4, v6    int
}

// NewClientIP returns a ClientIP configured by cfg. It reports an invalid
// prefix, an out-of-range prefix length or an unknown header.
func NewClientIP(cfg IPConfig) (*ClientIP, error) {
	c := &ClientIP{header: HeaderXForwardedFor, v4: 32, v6: 64}
	switch http.CanonicalHeaderKey(cfg.Header) {
	case "", HeaderXForwardedFor:
	case HeaderForwarded:
		c.header, c.forwarded = HeaderForwarded, true
	default:
		return nil, fmt.Errorf("httplimit: forwarding header %q is neither %s nor %s", cfg.Header, HeaderXForwardedFor, HeaderForwarded)
	}
	if cfg.IPv4Prefix != 0 {
		if cfg.IPv4Prefix < 1 || cfg.IPv4Prefix > 32 {
			return nil, fmt.Errorf("httplimit: IPv4 prefix length %d is outside 1 to 32", cfg.IPv4Prefix)
		}
		c.v4 = cfg.IPv4Prefix
	}
	if cfg.IPv6Prefix != 0 {
		if cfg.IPv6Prefix < 1 || cfg.IPv6Prefix > 128 {
			return nil, fmt.Errorf("httplimit: IPv6 prefix length %d is outside 1 to 128", cfg.IPv6Prefix)
		}
		c.v6 = cfg.IPv6Prefix
	}
	for _, p := range cfg.TrustedProxies {
		if !p.IsValid() {
			return nil, fmt.Errorf("httplimit: invalid trusted proxy prefix %v", p)
		}
		a := p.Addr()
		if a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		c.trusted = append(c.trusted, p.Masked())
	}
	return c, nil
}

// trusts reports whether a is a trusted proxy's address.
func (c *ClientIP) trusts(a netip.Addr) bool {
	for _, p := range c.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Addr returns the client's address: the remote address when it is not a
// trusted proxy; otherwise the rightmost address of the forwarding header
// that is not a trusted proxy's, or the leftmost if all are. A hop that
// does not parse as an address (an obfuscated Forwarded node, "unknown",
// garbage) ends the walk at the trusted proxy that reported it: the
// client is then keyed as that proxy rather than by a value it may have
// chosen. So does a Forwarded element without a for= node. The address
// is unmapped and has no zone. Addr fails with
// [ErrNoKey] when the remote address is not an IP address (a Unix
// socket).
func (c *ClientIP) Addr(r *http.Request) (netip.Addr, error) {
	addr, ok := parseHop(r.RemoteAddr)
	if !ok {
		return netip.Addr{}, fmt.Errorf("%w: remote address %q is not an IP address", ErrNoKey, r.RemoteAddr)
	}
	if !c.trusts(addr) {
		return addr, nil
	}
	lines := r.Header[c.header]
	for i := len(lines) - 1; i >= 0; i-- {
		var done bool
		if addr, done = c.walk(lines[i], addr); done {
			break
		}
	}
	return addr, nil
}

// walk walks one line of the forwarding header from right to left, from
// addr, the trusted address nearest the server so far. It returns the
// address reached and whether the walk is over: at the first hop that is
// not a trusted proxy's, or that does not parse.
//
// Elements are split at every comma, for Forwarded too, quoted or not. No
// node a proxy writes holds a comma, so a quoted comma can only come from
// a client, left of the elements trusted proxies appended; honouring it
// would let a client send an unterminated quote that swallows the element
// its proxy appends after it, and so hide its own address. A non-empty
// Forwarded element without for= ends the walk like an unparsable node:
// the proxy that wrote it did not say who its client was, and what lies
// left of it may be the client's own words.
func (c *ClientIP) walk(line string, addr netip.Addr) (netip.Addr, bool) {
	for line != "" {
		elem := line
		if j := strings.LastIndexByte(line, ','); j >= 0 {
			elem, line = line[j+1:], line[:j]
		} else {
			line = ""
		}
		hop := strings.TrimSpace(elem)
		if hop == "" { // "a,,b" or a trailing comma: no hop
			continue
		}
		if c.forwarded {
			hop = forwardedFor(hop)
		}
		next, ok := parseHop(hop)
		if !ok {
			return addr, true
		}
		if addr = next; !c.trusts(next) {
			return addr, true
		}
	}
	return addr, false
}

// forwardedFor returns the value of the for= parameter of one Forwarded
// element (RFC 7239 §4), unquoted; "" when it has none. A quoted value
// without its closing quote is returned with its opening quote, which no
// address parses.
func forwardedFor(elem string) string {
	for elem != "" {
		// The next pair ends at a ';' outside a quoted string.
		i, quoted := 0, false
		for ; i < len(elem) && (quoted || elem[i] != ';'); i++ {
			switch elem[i] {
			case '"':
				quoted = !quoted
			case '\\':
				if quoted {
					i++
				}
			}
		}
		pair := elem[:min(i, len(elem))]
		elem = elem[min(i+1, len(elem)):]
		name, value, ok := strings.Cut(pair, "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(name), "for") {
			continue
		}
		value = strings.TrimSpace(value)
		if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
			value = value[1 : len(value)-1]
			if strings.IndexByte(value, '\\') >= 0 {
				value = unescape(value)
			}
		}
		return value
	}
	return ""
}

// unescape removes the backslashes of a quoted-string's quoted pairs.
func unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// parseHop parses an address as a remote address or a forwarding hop
// writes it: "1.2.3.4", "1.2.3.4:80", "2001:db8::1", "[2001:db8::1]" or
// "[2001:db8::1]:80", with or without a zone. It returns the address
// unmapped and without its zone.
func parseHop(s string) (netip.Addr, bool) {
	var a netip.Addr
	var err error
	// Choose the parser from the shape, to spare the hot path a failed
	// parse (and its error's allocation).
	switch {
	case len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']':
		a, err = netip.ParseAddr(s[1 : len(s)-1])
	case len(s) > 0 && s[0] == '[', strings.Count(s, ":") == 1: // [v6]:port, v4:port
		var ap netip.AddrPort
		ap, err = netip.ParseAddrPort(s)
		a = ap.Addr()
	default:
		a, err = netip.ParseAddr(s)
	}
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

// Prefix returns the network the client address a is keyed by: a's /32 or
// the configured IPv4 prefix, or the configured IPv6 prefix (/64 by
// default). a is unmapped first.
func (c *ClientIP) Prefix(a netip.Addr) netip.Prefix {
	a = a.Unmap().WithZone("")
	bits := c.v6
	if a.Is4() {
		bits = c.v4
	}
	p, _ := a.Prefix(bits) // bits is within range for a's family
	return p
}

// Key returns the request's client key: "ip:" and the client's address
// (see [ClientIP.Addr]) when its prefix is a whole address, such as
// "ip:192.0.2.7"; otherwise "ip:" and the prefix, such as
// "ip:2001:db8::/64". Its method value is a [KeyFunc].
func (c *ClientIP) Key(r *http.Request) (string, error) {
	a, err := c.Addr(r)
	if err != nil {
		return "", err
	}
	p := c.Prefix(a)
	var buf [64]byte
	b := append(buf[:0], "ip:"...)
	b = p.Addr().AppendTo(b)
	if p.Bits() != p.Addr().BitLen() {
		b = append(b, '/')
		b = strconv.AppendInt(b, int64(p.Bits()), 10)
	}
	return string(b), nil
}

// HeaderKey returns a [KeyFunc] that keys a request by the value of the
// header name, such as an API key: the key is the canonical header name
// in lower case, a colon and the value ("x-api-key:abc"), with leading and
// trailing white space removed. A request without the header, or with an
// empty value, has no key. A value too long for a key is replaced by its
// SHA-256, in hex after a '#' ("x-api-key#9f86..."), so a long token
// still keys its client and a client cannot choose a collision.
//
// A header is only as trustworthy as whatever checks it: key by a header
// that an earlier handler authenticates, or accept that a client may
// spread its requests over as many keys as it can make up values.
func HeaderKey(name string) KeyFunc {
	name = http.CanonicalHeaderKey(name)
	prefix := strings.ToLower(name)
	return func(r *http.Request) (string, error) {
		v := strings.TrimSpace(r.Header.Get(name))
		if v == "" {
			return "", fmt.Errorf("%w: no %s header", ErrNoKey, name)
		}
		return joinKey(prefix, v), nil
	}
}

// IdentityKey returns a [KeyFunc] that keys a request by an authenticated
// identity, such as a user id an authentication middleware earlier in the
// chain put in the request's context: id returns it, or "" when the
// request is anonymous, which then has no key. The key is "id:" and the
// identity, hashed as by [HeaderKey] when too long.
func IdentityKey(id func(r *http.Request) string) KeyFunc {
	return func(r *http.Request) (string, error) {
		v := id(r)
		if v == "" {
			return "", fmt.Errorf("%w: anonymous request", ErrNoKey)
		}
		return joinKey("id", v), nil
	}
}

// FirstKey returns a [KeyFunc] that tries each of fns in order and returns
// the first key found, such as an identity and else the client's address:
//
//	httplimit.FirstKey(httplimit.IdentityKey(userID), clientIP.Key)
//
// It fails with the last function's error when none finds a key.
func FirstKey(fns ...KeyFunc) KeyFunc {
	fns = append([]KeyFunc(nil), fns...)
	return func(r *http.Request) (string, error) {
		err := ErrNoKey
		for _, f := range fns {
			k, ferr := f(r)
			if ferr == nil {
				if ferr = core.ValidateKey(k); ferr == nil {
					return k, nil
				}
				ferr = fmt.Errorf("%w: %w", ErrNoKey, ferr)
			}
			err = ferr
		}
		return "", err
	}
}

// joinKey returns kind + ":" + v, or kind + "#" + hex(sha256(v)) when that
// would be longer than a key may be.
func joinKey(kind, v string) string {
	if len(kind)+1+len(v) <= core.MaxKeyLen {
		return kind + ":" + v
	}
	sum := sha256.Sum256([]byte(v))
	return kind + "#" + hex.EncodeToString(sum[:])
}
