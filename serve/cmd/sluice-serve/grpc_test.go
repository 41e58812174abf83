package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/redistest"
)

// askOnce dials target with creds, sends one request of limitsV1's
// domain, and returns its limit, or the error.
func askOnce(target string, creds credentials.TransportCredentials) (uint32, error) {
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "a"}}}}})
	if err != nil {
		return 0, err
	}
	return resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit(), nil
}

// TestServeUnixSocket: with envoyproxy/ratelimit's GRPC_UDS, the RLS
// service listens on that Unix socket, where a gRPC client gets its
// answers.
func TestServeUnixSocket(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "rls.sock")
	r := startServeEnv(t, limitsV1, []string{"GRPC_UDS=" + sock})
	if got := r.srv.GRPCAddr(); got != sock {
		t.Errorf("gRPC listens on %q, want %q", got, sock)
	}
	if limit, err := askOnce("unix://"+sock, insecure.NewCredentials()); err != nil || limit != 10 {
		t.Errorf("over the socket: limit %d, %v; want 10", limit, err)
	}
}

// TestServeTLS: with envoyproxy/ratelimit's GRPC_SERVER_USE_TLS, its
// certificate files and a client CA, the gRPC port answers a client that
// trusts the server's CA and presents a certificate the client CA signed,
// and refuses a client without one, one with another CA's, one in plain
// text, and, with GRPC_CLIENT_TLS_SAN, one whose certificate does not
// name it. A new certificate written over the files is served on the
// next connections, without a restart. The certificates are the test's
// own.
func TestServeTLS(t *testing.T) {
	t.Parallel()
	ca, other := redistest.NewCA(t, "sluice-serve test"), redistest.NewCA(t, "another")
	dir := t.TempDir()
	certFile, keyFile := ca.CertificateFiles(t, dir, "server", x509.ExtKeyUsageServerAuth)
	env := func(san string) []string {
		return []string{
			"GRPC_SERVER_USE_TLS=true",
			"GRPC_SERVER_TLS_CERT=" + certFile,
			"GRPC_SERVER_TLS_KEY=" + keyFile,
			"GRPC_CLIENT_TLS_CACERT=" + ca.CertFile(t, t.TempDir()),
			"GRPC_CLIENT_TLS_SAN=" + san,
		}
	}
	client := func(trust, signer *redistest.CA) credentials.TransportCredentials {
		c := trust.ClientConfig()
		if signer != nil {
			c.Certificates = []tls.Certificate{signer.ClientCertificate(t, "envoy")}
		}
		return credentials.NewTLS(c)
	}
	r := startServeEnv(t, limitsV1, env("localhost")) // the client certificates name localhost
	addr := r.srv.GRPCAddr()
	for _, tt := range []struct {
		name  string
		creds credentials.TransportCredentials
		ok    bool
	}{
		{"a client certificate of the client CA", client(ca, ca), true},
		{"no client certificate", client(ca, nil), false},
		{"another CA's client certificate", client(ca, other), false},
		{"a client that trusts another CA", client(other, ca), false},
		{"plain text", insecure.NewCredentials(), false},
	} {
		limit, err := askOnce(addr, tt.creds)
		if tt.ok && (err != nil || limit != 10) {
			t.Errorf("%s: limit %d, %v; want 10", tt.name, limit, err)
		}
		if !tt.ok && err == nil {
			t.Errorf("%s: answered; want the handshake refused", tt.name)
		}
	}

	// The server's certificate is replaced on disk, renamed over the old
	// files as envoyproxy/ratelimit's TestReloadGRPCServerCerts does: the
	// next connections get the new one (looked for at most a second after
	// the last look).
	newCert, newKey := other.CertificateFiles(t, t.TempDir(), "server", x509.ExtKeyUsageServerAuth)
	for _, f := range [][2]string{{newCert, certFile}, {newKey, keyFile}} {
		if err := os.Rename(f[0], f[1]); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := askOnce(addr, client(other, ca))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new certificate was not served 30 s after it was written: %v\n%s", err, r.stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := askOnce(addr, client(ca, ca)); err == nil {
		t.Error("a client that trusts the old certificate's CA alone still connects")
	}

	// A SAN the client certificates do not name.
	certFile, keyFile = ca.CertificateFiles(t, t.TempDir(), "server", x509.ExtKeyUsageServerAuth)
	r2 := startServeEnv(t, limitsV1, env("rls-client.example"))
	if _, err := askOnce(r2.srv.GRPCAddr(), client(ca, ca)); err == nil {
		t.Error("GRPC_CLIENT_TLS_SAN=rls-client.example: a client certificate for localhost was accepted")
	}
}
