package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/contrib/httplimit"
	"github.com/sluicehq/sluice/core"
)

// request returns a request from remote carrying the header fields
// ("Name: value", one field line each).
func request(remote string, fields ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remote
	for _, f := range fields {
		name, value, _ := strings.Cut(f, ": ")
		r.Header.Add(name, value)
	}
	return r
}

func prefixes(s ...string) []netip.Prefix {
	var ps []netip.Prefix
	for _, p := range s {
		ps = append(ps, netip.MustParsePrefix(p))
	}
	return ps
}

func TestClientIPKey(t *testing.T) {
	t.Parallel()
	proxies := prefixes("10.0.0.0/8", "2001:db8:ffff::/48")
	for i, tc := range []struct {
		cfg    httplimit.IPConfig
		remote string
		fields []string
		want   string // "" for ErrNoKey
	}{
		// Nothing trusted: the remote address, whatever the headers say.
		{httplimit.IPConfig{}, "192.0.2.1:1234", []string{"X-Forwarded-For: 198.51.100.1"}, "ip:192.0.2.1"},
		{httplimit.IPConfig{}, "192.0.2.1:1234", []string{"Forwarded: for=198.51.100.1"}, "ip:192.0.2.1"},
		{httplimit.IPConfig{}, "[::ffff:192.0.2.1]:1234", nil, "ip:192.0.2.1"},
		{httplimit.IPConfig{}, "[2001:db8:1:2:3:4:5:6]:1234", nil, "ip:2001:db8:1:2::/64"},
		{httplimit.IPConfig{}, "[fe80::1%eth0]:1234", nil, "ip:fe80::/64"},
		{httplimit.IPConfig{}, "192.0.2.1", nil, "ip:192.0.2.1"}, // no port
		{httplimit.IPConfig{}, "@", nil, ""},                     // a Unix socket
		{httplimit.IPConfig{}, "", nil, ""},
		{httplimit.IPConfig{IPv6Prefix: 128}, "[2001:db8::1]:1", nil, "ip:2001:db8::1"},
		{httplimit.IPConfig{IPv6Prefix: 56}, "[2001:db8:0:abff::1]:1", nil, "ip:2001:db8:0:ab00::/56"},
		{httplimit.IPConfig{IPv4Prefix: 24}, "192.0.2.77:1", nil, "ip:192.0.2.0/24"},
		{httplimit.IPConfig{IPv4Prefix: 24}, "[::ffff:192.0.2.77]:1", nil, "ip:192.0.2.0/24"},

		// Trusted proxies: right to left to the first untrusted hop.
		{httplimit.IPConfig{TrustedProxies: proxies}, "10.0.0.1:1", []string{"X-Forwarded-For: 203.0.113.5"}, "ip:203.0.113.5"},
		{httplimit.IPConfig{TrustedProxies: proxies}, "10.0.0.1:1", []string{"X-Forwarded-For: 198.51.100.1, 203.0.113.5, 10.1.1.1"}, "ip:203.0.113.5"},
		{httplimit.IPConfig{TrustedProxies: proxies}, "10.0.0.1:1", []string{"X-Forwarded-For: 198.51.100.1", "X-Forwarded-For: 203.0.113.5,10.1.1.1"}, "ip:203.0.113.5"},
		{httplimit.IPConfig{TrustedProxies: proxies}, "10.0.0.1:1", []string{"X-Forwarded-For: 198.51.100.1, 203.0.113.5", "X-Forwarded-For: 10.1.1.1"}, "ip:203.0.113.5"},
		{httplimit.IPConfig{TrustedProxies: proxies}, "10.0.0.1:1", []string{"X-Forwarded-For: 10.3.3.3, 10.2.2.2"}, "ip:10.3.3.3"},    // all trusted: the leftmost
		{httplimit.IPConfig{TrustedProxies: proxies}, "10.0.0.1:1", nil, "ip:10.0.0.1"},                                                // no header: the proxy
		{httplimit.IPConfig{TrustedProxies: proxies}, "10.0.0.1:1", []string{"X-Forwarded-For: 198.51.100.1, garbage"}, "ip:10.0.0.1"}, // garbage ends the walk
		{httplimit.IPConfig{TrustedProxies: proxies}, "10.0.0.1:1", []string{"X-Forwarded-For: 198.51.100.1,, ,"}, "ip:198.51.100.1"},  // empty hops skipped
		{httplimit.IPConfig{TrustedProxies: proxies}, "10.0.0.1:1", []string{"X-Forwarded-For: 203.0.113.5:4711"}, "ip:203.0.113.5"},
		{httplimit.IPConfig{TrustedProxies: proxies}, "10.0.0.1:1", []string{"X-Forwarded-For: [2001:db8::1]:4711"}, "ip:2001:db8::/64"},
		{httplimit.IPConfig{TrustedProxies: proxies}, "10.0.0.1:1", []string{"X-Forwarded-For: ::ffff:203.0.113.5"}, "ip:203.0.113.5"},
		{httplimit.IPConfig{TrustedProxies: proxies}, "[2001:db8:ffff::1]:1", []string{"X-Forwarded-For: 2001:db8:5::1"}, "ip:2001:db8:5::/64"},
		{httplimit.IPConfig{TrustedProxies: proxies}, "[::ffff:10.0.0.1]:1", []string{"X-Forwarded-For: 203.0.113.5"}, "ip:203.0.113.5"}, // mapped remote is trusted
		{httplimit.IPConfig{TrustedProxies: prefixes("::ffff:10.0.0.0/104")}, "10.0.0.1:1", []string{"X-Forwarded-For: 203.0.113.5"}, "ip:203.0.113.5"},
		{httplimit.IPConfig{TrustedProxies: proxies}, "192.0.2.1:1", []string{"X-Forwarded-For: 203.0.113.5"}, "ip:192.0.2.1"}, // untrusted remote
		// Only the configured header is read.
		{httplimit.IPConfig{TrustedProxies: proxies}, "10.0.0.1:1", []string{"Forwarded: for=203.0.113.5"}, "ip:10.0.0.1"},

		// Forwarded (RFC 7239).
		{httplimit.IPConfig{TrustedProxies: proxies, Header: "forwarded"}, "10.0.0.1:1", []string{"X-Forwarded-For: 198.51.100.1"}, "ip:10.0.0.1"},
		{httplimit.IPConfig{TrustedProxies: proxies, Header: "Forwarded"}, "10.0.0.1:1", []string{"Forwarded: for=198.51.100.1;proto=https, For=203.0.113.5;by=10.0.0.1"}, "ip:203.0.113.5"},
		{httplimit.IPConfig{TrustedProxies: proxies, Header: "Forwarded"}, "10.0.0.1:1", []string{`Forwarded: for="[2001:db8::17]:4711"`}, "ip:2001:db8::/64"},
		{httplimit.IPConfig{TrustedProxies: proxies, Header: "Forwarded"}, "10.0.0.1:1", []string{`Forwarded: for="198.51.100.1, for=1.1.1.1", for=10.2.2.2`}, "ip:10.2.2.2"}, // a quoted comma is not a hop; the unparsable node ends the walk
		{httplimit.IPConfig{TrustedProxies: proxies, Header: "Forwarded"}, "10.0.0.1:1", []string{`Forwarded: for=198.51.100.1`, `Forwarded: proto=http;for="10.2.2.2:80"`}, "ip:198.51.100.1"},
		{httplimit.IPConfig{TrustedProxies: proxies, Header: "Forwarded"}, "10.0.0.1:1", []string{`Forwarded: for=198.51.100.1, for=_hidden`}, "ip:10.0.0.1"},
		{httplimit.IPConfig{TrustedProxies: proxies, Header: "Forwarded"}, "10.0.0.1:1", []string{`Forwarded: for=198.51.100.1, for=unknown`}, "ip:10.0.0.1"},
		// A trusted proxy's element without for= does not say who its client
		// was: what lies left of it may be the client's own words.
		{httplimit.IPConfig{TrustedProxies: proxies, Header: "Forwarded"}, "10.0.0.1:1", []string{`Forwarded: for=198.51.100.1, by=10.9.9.9`}, "ip:10.0.0.1"},
		{httplimit.IPConfig{TrustedProxies: proxies, Header: "Forwarded"}, "10.0.0.1:1", []string{`Forwarded: for=198.51.100.1, , ,`}, "ip:198.51.100.1"}, // empty elements: no hop
		{httplimit.IPConfig{TrustedProxies: proxies, Header: "Forwarded"}, "10.0.0.1:1", []string{`Forwarded: for="\"198.51.100.1"`}, "ip:10.0.0.1"},
		{httplimit.IPConfig{TrustedProxies: proxies, Header: "Forwarded"}, "10.0.0.1:1", []string{`Forwarded: for="198.51.100.1`}, "ip:10.0.0.1"},              // unterminated quote
		{httplimit.IPConfig{TrustedProxies: proxies, Header: "Forwarded"}, "10.0.0.1:1", []string{`Forwarded: for="1\.2.3.4";proto=http`}, "ip:1.2.3.4"},       // a quoted pair
		{httplimit.IPConfig{TrustedProxies: proxies, Header: "Forwarded"}, "10.0.0.1:1", []string{`Forwarded: proto="a;b";for=203.0.113.5`}, "ip:203.0.113.5"}, // a quoted ';'
		// A client's unterminated quote must not swallow the element its
		// proxy appends after it.
		{httplimit.IPConfig{TrustedProxies: proxies, Header: "Forwarded"}, "10.0.0.1:1", []string{`Forwarded: for="198.51.100.1, for=203.0.113.5`}, "ip:203.0.113.5"},
		{httplimit.IPConfig{TrustedProxies: proxies, Header: "Forwarded"}, "10.0.0.1:1", []string{`Forwarded: for="x, for="[2001:db8:5::1]:80"`}, "ip:2001:db8:5::/64"},
	} {
		c, err := httplimit.NewClientIP(tc.cfg)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		got, err := c.Key(request(tc.remote, tc.fields...))
		switch {
		case tc.want == "" && !errors.Is(err, httplimit.ErrNoKey):
			t.Errorf("case %d: Key(%s %q) = %q, %v; want ErrNoKey", i, tc.remote, tc.fields, got, err)
		case tc.want != "" && (err != nil || got != tc.want):
			t.Errorf("case %d: Key(%s %q) = %q, %v; want %q", i, tc.remote, tc.fields, got, err, tc.want)
		}
	}
}

// TestMappedAddressesAreTwoKeys is the regression test for masking mapped
// IPv4 addresses as IPv6: ::ffff:1.2.3.4 and ::ffff:5.6.7.8 share a /64
// as IPv6 addresses, and must not share a key.
func TestMappedAddressesAreTwoKeys(t *testing.T) {
	t.Parallel()
	c, err := httplimit.NewClientIP(httplimit.IPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := c.Key(request("[::ffff:1.2.3.4]:80"))
	b, _ := c.Key(request("[::ffff:5.6.7.8]:80"))
	if a == b || a != "ip:1.2.3.4" || b != "ip:5.6.7.8" {
		t.Errorf("keys %q and %q, want ip:1.2.3.4 and ip:5.6.7.8", a, b)
	}
	x, _ := c.Key(request("[2001:db8::1]:80"))
	y, _ := c.Key(request("[2001:db8::2]:80"))
	if x != y || x != "ip:2001:db8::/64" {
		t.Errorf("keys %q and %q, want both ip:2001:db8::/64", x, y)
	}
}

func TestHeaderKey(t *testing.T) {
	t.Parallel()
	f := httplimit.HeaderKey("x-api-key")
	for _, tc := range []struct {
		fields []string
		want   string
	}{
		{[]string{"X-Api-Key: abc"}, "x-api-key:abc"},
		{[]string{"X-Api-Key:   abc  "}, "x-api-key:abc"},
		{[]string{"X-Api-Key: a", "X-Api-Key: b"}, "x-api-key:a"},
		{[]string{"X-Api-Key: " + strings.Repeat("t", 2000)}, "x-api-key#(SHA-256)"},
		{nil, ""},
		{[]string{"X-Api-Key:  "}, ""},
	} {
		got, err := f(request("192.0.2.1:1", tc.fields...))
		switch {
		case tc.want == "":
			if !errors.Is(err, httplimit.ErrNoKey) {
				t.Errorf("%q: %q, %v; want ErrNoKey", tc.fields, got, err)
			}
		case strings.Contains(tc.want, "#"):
			if err != nil || !strings.HasPrefix(got, "x-api-key#") || len(got) != len("x-api-key#")+64 || core.ValidateKey(got) != nil {
				t.Errorf("long value: %q, %v; want x-api-key# and a SHA-256", got, err)
			}
		case err != nil || got != tc.want:
			t.Errorf("%q: %q, %v; want %q", tc.fields, got, err, tc.want)
		}
	}
}

type userKey struct{}

func TestIdentityAndFirstKey(t *testing.T) {
	t.Parallel()
	user := httplimit.IdentityKey(func(r *http.Request) string {
		s, _ := r.Context().Value(userKey{}).(string)
		return s
	})
	ip, err := httplimit.NewClientIP(httplimit.IPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	f := httplimit.FirstKey(user, ip.Key)
	r := request("192.0.2.1:1")
	if got, err := f(r); err != nil || got != "ip:192.0.2.1" {
		t.Errorf("anonymous: %q, %v; want ip:192.0.2.1", got, err)
	}
	r = r.WithContext(context.WithValue(r.Context(), userKey{}, "alice"))
	if got, err := f(r); err != nil || got != "id:alice" {
		t.Errorf("alice: %q, %v; want id:alice", got, err)
	}
	if _, err := httplimit.FirstKey(user)(request("@")); !errors.Is(err, httplimit.ErrNoKey) {
		t.Errorf("no key anywhere: %v, want ErrNoKey", err)
	}
	empty := func(*http.Request) (string, error) { return "", nil }
	if _, err := httplimit.FirstKey(empty)(request("@")); !errors.Is(err, httplimit.ErrNoKey) {
		t.Errorf("an empty key: %v, want ErrNoKey", err)
	}
}

func TestNewClientIPRejects(t *testing.T) {
	t.Parallel()
	for _, cfg := range []httplimit.IPConfig{
		{IPv4Prefix: 33}, {IPv4Prefix: -1}, {IPv6Prefix: 129}, {IPv6Prefix: -3},
		{Header: "X-Real-IP"}, {TrustedProxies: []netip.Prefix{{}}},
	} {
		if _, err := httplimit.NewClientIP(cfg); err == nil {
			t.Errorf("NewClientIP(%+v) succeeded, want an error", cfg)
		}
	}
}

// FuzzClientIP checks, for any remote address and header values, that Key
// does not panic and returns a valid key; that an untrusted remote address
// is the key whatever the headers say; and that whatever a client sends,
// the address its trusted proxy appends after it is the key.
func FuzzClientIP(f *testing.F) {
	f.Add("10.0.0.1:1", "198.51.100.1, 10.1.1.1", `for="[2001:db8::1]:80";proto=http, for=_x`)
	f.Add("[::ffff:10.0.0.1]:1", ",,,", `for="\"`)
	f.Add("192.0.2.1:1", "198.51.100.1", `for="198.51.100.1`)
	trusted := prefixes("10.0.0.0/8")
	none, _ := httplimit.NewClientIP(httplimit.IPConfig{})
	xff, _ := httplimit.NewClientIP(httplimit.IPConfig{TrustedProxies: trusted})
	fwd, _ := httplimit.NewClientIP(httplimit.IPConfig{TrustedProxies: trusted, Header: httplimit.HeaderForwarded})
	const client = "ip:203.0.113.5"
	f.Fuzz(func(t *testing.T, remote, x, fw string) {
		r := request(remote, "X-Forwarded-For: "+x, "Forwarded: "+fw)
		direct, derr := none.Key(r)
		for _, c := range []*httplimit.ClientIP{xff, fwd} {
			k, err := c.Key(r)
			if err == nil && core.ValidateKey(k) != nil {
				t.Fatalf("Key = %q, not a valid key", k)
			}
			if a, perr := netip.ParseAddrPort(remote); perr == nil && !trusted[0].Contains(a.Addr().Unmap()) && (k != direct || err != nil || derr != nil) {
				t.Fatalf("untrusted remote %s: Key = %q, %v; want %q", remote, k, err, direct)
			}
		}
		// What the client sent, then what its proxy (the remote, 10.0.0.1)
		// appended.
		r = request("10.0.0.1:1", "X-Forwarded-For: "+x+", 203.0.113.5", "Forwarded: "+fw+", for=203.0.113.5")
		for _, c := range []*httplimit.ClientIP{xff, fwd} {
			if k, err := c.Key(r); k != client || err != nil {
				t.Fatalf("client sent %q / %q: Key = %q, %v; want %s", x, fw, k, err, client)
			}
		}
	})
}
