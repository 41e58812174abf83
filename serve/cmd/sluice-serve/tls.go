package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// certCheck is how often, at most, the gRPC port's certificate files are
// looked at for a change, on a handshake.
const certCheck = time.Second

// grpcTLS is the gRPC port's TLS configuration, as envoyproxy/ratelimit
// makes it from GRPC_SERVER_TLS_CERT, GRPC_SERVER_TLS_KEY,
// GRPC_CLIENT_TLS_CACERT and GRPC_CLIENT_TLS_SAN: the server's
// certificate and key, read again when their files change (as the peer
// reloads them); with caFile, a client certificate signed by one of its
// CAs is required; with san too, one that names san.
func grpcTLS(certFile, keyFile, caFile, san string, log *slog.Logger) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("-grpc-tls needs -grpc-tls-cert and -grpc-tls-key (GRPC_SERVER_TLS_CERT, GRPC_SERVER_TLS_KEY)")
	}
	r := &certFiles{certFile: certFile, keyFile: keyFile, log: log}
	if err := r.load(); err != nil {
		return nil, err
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.get}
	if caFile == "" {
		if san != "" {
			log.Warn("-grpc-client-san (GRPC_CLIENT_TLS_SAN) is not checked without -grpc-client-ca (GRPC_CLIENT_TLS_CACERT), as envoyproxy/ratelimit does not check it")
		}
		return c, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("-grpc-client-ca (GRPC_CLIENT_TLS_CACERT): %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("-grpc-client-ca (GRPC_CLIENT_TLS_CACERT) %s: no PEM certificate", caFile)
	}
	c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
	if san != "" {
		// The chain is verified already; the leaf must name san, as a
		// client certificate.
		c.VerifyPeerCertificate = func(_ [][]byte, chains [][]*x509.Certificate) error {
			for _, chain := range chains {
				opts := x509.VerifyOptions{Roots: pool, Intermediates: x509.NewCertPool(), DNSName: san, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
				for _, cert := range chain[1:] {
					opts.Intermediates.AddCert(cert)
				}
				if _, err := chain[0].Verify(opts); err != nil {
					return fmt.Errorf("the client certificate: %w", err)
				}
			}
			return nil
		}
	}
	return c, nil
}

// certFiles is the server's certificate, read from its files, and read
// again on a handshake at least certCheck after the last look if either
// file's size or modification time changed. A certificate that does not
// load keeps the last one in force, with a warning.
type certFiles struct {
	certFile, keyFile string
	log               *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   [2]fileStamp
	checked time.Time
}

// fileStamp is what tells a file changed: another file (renamed over
// it), or another size or modification time.
type fileStamp struct {
	info os.FileInfo // nil: the file could not be read
}

// same reports whether a and b are the same file, unchanged.
func (a fileStamp) same(b fileStamp) bool {
	if a.info == nil || b.info == nil {
		return a.info == b.info
	}
	return os.SameFile(a.info, b.info) && a.info.Size() == b.info.Size() && a.info.ModTime().Equal(b.info.ModTime())
}

// stamps returns the files' stamps.
func (r *certFiles) stamps() [2]fileStamp {
	var st [2]fileStamp
	for i, path := range []string{r.certFile, r.keyFile} {
		if info, err := os.Stat(path); err == nil {
			st[i] = fileStamp{info}
		}
	}
	return st
}

// load reads the certificate and its key.
func (r *certFiles) load() error {
	st := r.stamps()
	pair, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("-grpc-tls-cert, -grpc-tls-key (GRPC_SERVER_TLS_CERT, GRPC_SERVER_TLS_KEY): %w", err)
	}
	r.cert, r.stamp, r.checked = &pair, st, time.Now()
	return nil
}

// get is the configuration's GetCertificate.
func (r *certFiles) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.checked) >= certCheck {
		r.checked = time.Now()
		if st := r.stamps(); !st[0].same(r.stamp[0]) || !st[1].same(r.stamp[1]) {
			if err := r.load(); err != nil {
				r.log.Warn("the gRPC port's certificate did not load; the last one stays in force", "err", err)
			} else {
				r.log.Info("the gRPC port's certificate reloaded", "cert", r.certFile)
			}
		}
	}
	return r.cert, nil
}
