package grpclimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/core"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// ErrNoKey reports a call from which a [KeyFunc] could not take a key: a
// missing metadata entry, a peer that is not an IP address. The
// interceptors answer such a call with codes.InvalidArgument; they never
// let it through unlimited.
var ErrNoKey = errors.New("grpclimit: call has no rate-limit key")

// KeyFunc returns the key a call to fullMethod ("/package.Service/Method")
// is charged to under one rule, or an error wrapping [ErrNoKey]. A key
// must be 1 to [core.MaxKeyLen] bytes; the interceptors treat any other
// key as missing. Each rule of a stack keeps its state apart from every
// other rule's, so keys need only be distinct within a rule.
type KeyFunc func(ctx context.Context, fullMethod string) (string, error)

// GlobalKey is a [KeyFunc] that keys every call alike, with the key
// "global": for a rule that limits the whole service together, such as
//
//	grpclimit.WithKey("global", grpclimit.GlobalKey)
func GlobalKey(context.Context, string) (string, error) { return "global", nil }

// PeerKey returns a [KeyFunc] that keys a call by its peer's address:
// "ip:" and the address for an IPv4 peer ("ip:192.0.2.7"), "ip:" and its
// network for an IPv6 one ("ip:2001:db8::/64"). An IPv4-mapped IPv6
// address is unmapped first, so IPv4 peers reached over an IPv6 socket
// keep a key each. ipv4Bits (1 to 32) and ipv6Bits (1 to 128) are the
// prefix lengths the peers are keyed by; the interceptors' default is
// PeerKey(32, 64). A peer that is not an IP address (a Unix socket, an
// in-memory listener) has no key.
//
// The peer is the address of the TCP connection: behind a proxy, it is
// the proxy's. Key such calls with [MetadataKey] on a value the proxy
// sets and clients cannot, or on an authenticated identity.
func PeerKey(ipv4Bits, ipv6Bits int) (KeyFunc, error) {
	switch {
	case ipv4Bits < 1 || ipv4Bits > 32:
		return nil, fmt.Errorf("grpclimit: IPv4 prefix length %d is outside 1 to 32", ipv4Bits)
	case ipv6Bits < 1 || ipv6Bits > 128:
		return nil, fmt.Errorf("grpclimit: IPv6 prefix length %d is outside 1 to 128", ipv6Bits)
	}
	return func(ctx context.Context, _ string) (string, error) {
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return "", fmt.Errorf("%w: no peer", ErrNoKey)
		}
		var a netip.Addr
		if tcp, ok := p.Addr.(*net.TCPAddr); ok {
			a = tcp.AddrPort().Addr()
		} else if ap, err := netip.ParseAddrPort(p.Addr.String()); err == nil {
			a = ap.Addr()
		}
		if !a.IsValid() {
			return "", fmt.Errorf("%w: peer %s is not an IP address", ErrNoKey, p.Addr)
		}
		a = a.Unmap().WithZone("")
		bits := ipv6Bits
		if a.Is4() {
			bits = ipv4Bits
		}
		pfx, _ := a.Prefix(bits)
		var buf [64]byte
		b := append(buf[:0], "ip:"...)
		b = pfx.Addr().AppendTo(b)
		if bits != a.BitLen() {
			b = append(b, '/')
			b = strconv.AppendInt(b, int64(bits), 10)
		}
		return string(b), nil
	}, nil
}

// MetadataKey returns a [KeyFunc] that keys a call by the first value of
// the incoming metadata entry name, such as an API key: the key is the
// name in lower case, a colon and the value ("x-api-key:abc"). A call
// without the entry, or with an empty value, has no key. A value too long
// for a key is replaced by its SHA-256 in hex after a '#'.
func MetadataKey(name string) KeyFunc {
	name = strings.ToLower(name)
	return func(ctx context.Context, _ string) (string, error) {
		vs := metadata.ValueFromIncomingContext(ctx, name)
		if len(vs) == 0 || strings.TrimSpace(vs[0]) == "" {
			return "", fmt.Errorf("%w: no %s metadata", ErrNoKey, name)
		}
		v := strings.TrimSpace(vs[0])
		if len(name)+1+len(v) <= core.MaxKeyLen {
			return name + ":" + v, nil
		}
		sum := sha256.Sum256([]byte(v))
		return name + "#" + hex.EncodeToString(sum[:]), nil
	}
}

// FirstKey returns a [KeyFunc] that tries each of fns in order and returns
// the first key found, such as an API key and else the peer's address.
// It fails with the last function's error when none finds one.
func FirstKey(fns ...KeyFunc) KeyFunc {
	fns = append([]KeyFunc(nil), fns...)
	return func(ctx context.Context, method string) (string, error) {
		err := ErrNoKey
		for _, f := range fns {
			k, ferr := f(ctx, method)
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
