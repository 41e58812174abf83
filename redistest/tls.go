package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/redistest/spawn"
)

// certValidity is how long a test certificate is valid, from an hour
// before it was made (a clock a little behind is no reason to fail).
const certValidity = 24 * time.Hour

// CA is a certificate authority made in memory for a test: a self-signed
// certificate and its key. A server started [WithTLS] presents a
// certificate the CA signed; [CA.ClientConfig] trusts the CA alone, so a
// client with another CA's configuration fails its handshake with that
// server. [CA.ClientCertificate] issues certificates for clients, which a
// server started [WithClientAuth] requires. A CA is safe for concurrent
// use.
type CA struct {
	cert    *x509.Certificate
	certPEM []byte
	key     *ecdsa.PrivateKey
}

// NewCA makes a CA whose certificate's common name is name. It fails the
// test if the certificate cannot be made.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	ca, err := newCA(name)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return ca
}

func newCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("redistest: CA key: %w", err)
	}
	tmpl := certTemplate(name)
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("redistest: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("redistest: CA certificate: %w", err)
	}
	return &CA{cert: cert, certPEM: pemBlock("CERTIFICATE", der), key: key}, nil
}

// certTemplate returns a certificate's common fields: a random serial
// number, the subject, the validity.
func certTemplate(name string) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certValidity),
	}
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// Pool returns a certificate pool holding the CA's certificate alone.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// ClientConfig returns a TLS configuration for a client of a server
// started WithTLS(ca): it trusts ca alone, and presents no certificate of
// its own (add one from [CA.ClientCertificate] for a server started
// [WithClientAuth]). The server's certificate is for 127.0.0.1 and
// localhost, so the client needs no ServerName when it dials
// [Server.TLSAddr]. Each call returns a new configuration.
func (ca *CA) ClientConfig() *tls.Config {
	return &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
}

// ClientCertificate returns a certificate for a TLS client, whose common
// name is name, signed by the CA, with its key: put it in a
// tls.Config's Certificates. A server started WithTLS(ca) and
// [WithClientAuth] accepts it; one started with another CA refuses it.
// ClientCertificate fails the test if the certificate cannot be made.
func (ca *CA) ClientCertificate(t testing.TB, name string) tls.Certificate {
	t.Helper()
	certPEM, keyPEM, err := ca.issue(name, x509.ExtKeyUsageClientAuth)
	if err == nil {
		var cert tls.Certificate
		if cert, err = tls.X509KeyPair(certPEM, keyPEM); err == nil {
			return cert
		}
	}
	t.Fatalf("redistest: client certificate %q: %v", name, err)
	return tls.Certificate{}
}

// CertificateFiles writes a certificate for name, 127.0.0.1 and
// localhost, signed by the CA for usage (x509.ExtKeyUsageServerAuth for a
// server's, x509.ExtKeyUsageClientAuth for a client's), and its key, to
// PEM files in dir, for a program that reads them: it returns their
// paths. It fails the test if the files cannot be made.
func (ca *CA) CertificateFiles(t testing.TB, dir, name string, usage x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	certPEM, keyPEM, err := ca.issue(name, usage)
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	for _, f := range []struct {
		path string
		data []byte
	}{{certFile, certPEM}, {keyFile, keyPEM}} {
		if err == nil {
			err = os.WriteFile(f.path, f.data, 0o600)
		}
	}
	if err != nil {
		t.Fatalf("redistest: certificate files %q: %v", name, err)
	}
	return certFile, keyFile
}

// CertFile writes the CA's certificate to a PEM file in dir, ca.crt, for
// a program that trusts the CA, and returns its path. It fails the test
// if the file cannot be written.
func (ca *CA) CertFile(t testing.TB, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(path, ca.certPEM, 0o600); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return path
}

// issue returns a certificate for name, 127.0.0.1 and localhost, signed by
// the CA for usage (a server's or a client's), and its key, both in PEM.
func (ca *CA) issue(name string, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("redistest: key: %w", err)
	}
	tmpl := certTemplate(name)
	tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	tmpl.DNSNames = []string{"localhost"}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{usage}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("redistest: certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("redistest: key: %w", err)
	}
	return pemBlock("CERTIFICATE", der), pemBlock("EC PRIVATE KEY", keyDER), nil
}

// WithTLS has [Start] open a TLS port too, on another free port
// ([Server.TLSAddr]), where the server presents a certificate for
// 127.0.0.1 and localhost that ca signed; clients need no certificate of
// their own unless [WithClientAuth] is given too. The plain port stays
// open, for the package's own connections ([Server.Do]). It needs a
// redis-server built with TLS, as Debian's is. [StartCluster] and
// [StartSentinel] reject it.
func WithTLS(ca *CA) Option {
	return optionFunc(func(c *config) {
		if ca == nil {
			c.fail(errors.New("redistest: WithTLS(nil)"))
			return
		}
		c.tls = ca
	})
}

// WithClientAuth has a server started [WithTLS] require a certificate
// from each client of its TLS port (tls-auth-clients yes), one that the
// same CA signed ([CA.ClientCertificate]): a handshake without one, or
// with another CA's, fails. The package's own connections use the plain
// port and need none. Start fails the test if WithTLS is not given too.
func WithClientAuth() Option {
	return optionFunc(func(c *config) { c.clientAuth = true })
}

// listenTLS picks the server's TLS port, writes its certificate, key and
// CA certificate to its directory, and adds the arguments that use them;
// clientAuth has the server require clients' certificates that the CA
// signed. A port taken before redis-server binds it fails the start as a
// taken plain port does, and Start tries again with new ports.
func (s *Server) listenTLS(ca *CA, clientAuth bool) error {
	port, err := spawn.FreePort()
	for err == nil && port == s.port {
		port, err = spawn.FreePort()
	}
	if err != nil {
		return fmt.Errorf("redistest: %w", err)
	}
	certPEM, keyPEM, err := ca.issue("redistest", x509.ExtKeyUsageServerAuth)
	if err != nil {
		return err
	}
	files := []struct {
		name string
		data []byte
	}{{"tls.crt", certPEM}, {"tls.key", keyPEM}, {"ca.crt", ca.certPEM}}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(s.dir, f.name), f.data, 0o600); err != nil {
			return fmt.Errorf("redistest: %w", err)
		}
	}
	auth := "no"
	if clientAuth {
		auth = "yes"
	}
	s.tlsPort = port
	s.args = append(s.args,
		"--tls-port", strconv.Itoa(port),
		"--tls-cert-file", filepath.Join(s.dir, "tls.crt"),
		"--tls-key-file", filepath.Join(s.dir, "tls.key"),
		"--tls-ca-cert-file", filepath.Join(s.dir, "ca.crt"),
		"--tls-auth-clients", auth,
	)
	return nil
}
