package redistest

import (
	"bufio"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"testing"
)

// tlsDo sends one command over a TLS connection to addr made with cfg,
// and returns its reply, or the handshake's error.
func tlsDo(addr string, cfg *tls.Config, args ...string) (Reply, error) {
	nc, err := tls.DialWithDialer(&net.Dialer{Timeout: dialTimeout}, "tcp", addr, cfg)
	if err != nil {
		return Reply{}, err
	}
	defer nc.Close()
	c := &conn{nc: nc, r: bufio.NewReader(nc), w: bufio.NewWriter(nc), timeout: ioTimeout}
	return c.do(args)
}

// TestWithTLS starts a server with a TLS port: a client trusting the CA
// that signed its certificate is served, one trusting another CA fails
// its handshake, and the port survives a restart.
func TestWithTLS(t *testing.T) {
	t.Parallel()
	ca, other := NewCA(t, "test CA"), NewCA(t, "another CA")
	s := Start(t, WithTLS(ca))
	if s.TLSAddr() == "" || s.TLSAddr() == s.Addr() {
		t.Fatalf("TLSAddr() = %q with Addr() %q", s.TLSAddr(), s.Addr())
	}
	ping := func(cfg *tls.Config) error {
		r, err := tlsDo(s.TLSAddr(), cfg, "PING")
		if err == nil {
			if str, _ := r.String(); str != "PONG" {
				err = errors.New("PING replied " + str)
			}
		}
		return err
	}
	if err := ping(ca.ClientConfig()); err != nil {
		t.Errorf("PING over TLS with the server's CA: %v", err)
	}
	var unknown *tls.CertificateVerificationError
	if err := ping(other.ClientConfig()); !errors.As(err, &unknown) {
		t.Errorf("PING over TLS with another CA: %v; want a certificate the client does not trust", err)
	}
	if got := doString(t, s, "PING"); got != "PONG" {
		t.Errorf("PING on the plain port = %q", got)
	}
	addr := s.TLSAddr()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if s.TLSAddr() != addr {
		t.Errorf("after Restart, TLSAddr() = %q, want %q", s.TLSAddr(), addr)
	}
	if err := ping(ca.ClientConfig()); err != nil {
		t.Errorf("PING over TLS after Restart: %v", err)
	}
	if plain := Start(t); plain.TLSAddr() != "" {
		t.Errorf("a server without WithTLS has TLSAddr() %q", plain.TLSAddr())
	}

	for _, opts := range [][]Option{
		{WithTLS(nil)},
		{WithArgs("--tls-port", "6380")},
	} {
		if s, err := startServer(opts, false, false); err == nil {
			s.close()
			t.Errorf("startServer with %v succeeded", opts)
		}
	}
	if s, err := startServer([]Option{WithTLS(ca)}, true, false); err == nil {
		s.close()
		t.Error("a cluster node started WithTLS")
	}
}

// TestWithClientAuth starts a server that requires clients'
// certificates: a client presenting one its CA signed is served, one
// presenting none, or another CA's, is refused; the plain port needs none.
func TestWithClientAuth(t *testing.T) {
	t.Parallel()
	ca, other := NewCA(t, "test CA"), NewCA(t, "another CA")
	s := Start(t, WithTLS(ca), WithClientAuth())
	withCert := func(cert *CA) *tls.Config {
		c := ca.ClientConfig()
		if cert != nil {
			c.Certificates = []tls.Certificate{cert.ClientCertificate(t, "client")}
		}
		return c
	}
	if r, err := tlsDo(s.TLSAddr(), withCert(ca), "PING"); err != nil {
		t.Errorf("PING with a certificate of the server's CA: %v", err)
	} else if str, _ := r.String(); str != "PONG" {
		t.Errorf("PING with a certificate of the server's CA replied %v", r)
	}
	for _, tt := range []struct {
		name string
		cert *CA
	}{{"no certificate", nil}, {"another CA's certificate", other}} {
		r, err := tlsDo(s.TLSAddr(), withCert(tt.cert), "PING")
		if err == nil {
			t.Errorf("PING with %s = %v, want a refused handshake", tt.name, r)
		}
		t.Logf("PING with %s: %v", tt.name, err)
	}
	if got := doString(t, s, "PING"); got != "PONG" {
		t.Errorf("PING on the plain port = %q", got)
	}
	if s, err := startServer([]Option{WithClientAuth()}, false, false); err == nil {
		s.close()
		t.Error("a server started WithClientAuth without WithTLS")
	}
}

// TestWithUser starts a server with ACL users: each is known with its
// password and held to its rules, and the package's own connections stay
// the default user's.
func TestWithUser(t *testing.T) {
	t.Parallel()
	s := Start(t,
		WithUser("reader", "pw1", "~*", "+@all", "-@write"),
		WithUser("other", "pw2", "~other:*", "+@all"))
	as := func(user, password string, args ...string) error {
		c, err := dial(s.Addr(), ioTimeout)
		if err != nil {
			return err
		}
		defer c.nc.Close()
		for _, cmd := range [][]string{{"AUTH", user, password}, args} {
			r, err := c.do(cmd)
			if err == nil {
				err = r.Err()
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	if err := as("reader", "pw1", "GET", "k"); err != nil {
		t.Errorf("reader GET: %v", err)
	}
	if err := as("reader", "pw1", "SET", "k", "v"); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
		t.Errorf("reader SET: %v, want NOPERM", err)
	}
	if err := as("other", "pw2", "SET", "k", "v"); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
		t.Errorf("other SET k: %v, want NOPERM", err)
	}
	if err := as("other", "pw2", "SET", "other:k", "v"); err != nil {
		t.Errorf("other SET other:k: %v", err)
	}
	if err := as("other", "wrong", "PING"); err == nil || !strings.HasPrefix(err.Error(), "WRONGPASS") {
		t.Errorf("other with a wrong password: %v, want WRONGPASS", err)
	}
	do(t, s, "SET", "k", "v") // the default user

	for _, o := range []Option{
		WithUser("default", "pw"),
		WithUser("", "pw"),
		WithUser("u", ""),
		WithUser("u", "two words"),
	} {
		if s, err := startServer([]Option{o}, false, false); err == nil {
			s.close()
			t.Errorf("startServer with %v succeeded", o)
		}
	}
}
