package classifytest

import (
	"context"
	"crypto/tls"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/redistest"
)

// MutualTLS is a client's TLS configuration that trusts the CA trust and,
// if cert is not nil, presents a client certificate cert signed.
func MutualTLS(t testing.TB, trust, cert *redistest.CA) *tls.Config {
	c := trust.ClientConfig()
	if cert != nil {
		c.Certificates = []tls.Certificate{cert.ClientCertificate(t, "sluice")}
	}
	return c
}

// RunTLS makes calls through s whose TLS handshake fails, to a server that
// requires a client certificate: the server's certificate is another
// CA's, or the client presents none or another CA's. The store's error
// says what failed, as far as the client heard it, is classified as the
// store's failure, and a breaker answers by its mode, with no error to
// its callers.
func RunTLS(t *testing.T, s Stores) {
	t.Helper()
	ca, other := redistest.NewCA(t, "sluice test CA"), redistest.NewCA(t, "another CA")
	srv := redistest.Start(t, redistest.WithTLS(ca), redistest.WithClientAuth())
	// With TLS 1.3 the client's handshake ends before the server has
	// checked the client's certificate: the server's refusal, an alert,
	// comes after it, and the server closes the connection. A client
	// that goes on writing hears the reset first, which says nothing of
	// certificates: rueidis did in most runs; go-redis heard the alert
	// in every run.
	const reset = "connection reset by peer"
	for _, tt := range []struct {
		name        string
		trust, cert *redistest.CA
		says        []string // what the error may say
	}{
		{"server certificate of another CA", other, ca, []string{"certificate signed by unknown authority"}},
		{"no client certificate", ca, nil, []string{"certificate required", reset}},
		{"client certificate of another CA", ca, other, []string{"unknown certificate authority", reset}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := Dial{Addr: srv.TLSAddr(), TLS: MutualTLS(t, tt.trust, tt.cert)}
			store := s.Single(t, d)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err := store.Apply(ctx, Request("k"))
			Check(t, err, true)
			if !slices.ContainsFunc(tt.says, func(s string) bool { return strings.Contains(err.Error(), s) }) {
				t.Errorf("the error says none of %q", tt.says)
			}
			CheckBreaker(t, s.Single(t, d), Request("k"))
		})
	}
}
