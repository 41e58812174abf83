package redistest

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// role returns the first element of s's ROLE reply: "master" or "slave".
func role(t *testing.T, s *Server) string {
	t.Helper()
	r := do(t, s, "ROLE")
	fields, err := r.Array()
	if err != nil || len(fields) == 0 {
		t.Fatalf("ROLE on %s replied %v", s.Addr(), r)
	}
	str, err := fields[0].String()
	if err != nil {
		t.Fatalf("ROLE on %s replied %v", s.Addr(), r)
	}
	return str
}

// TestSentinel starts a Sentinel set, checks what it reports, writes a key
// to the primary, kills the primary and waits for the failover: the
// replica is promoted, keeps the key, takes writes, and the sentinels
// report it.
func TestSentinel(t *testing.T) {
	t.Parallel()
	began := time.Now()
	s := StartSentinel(t)
	t.Logf("the set was ready after %v", time.Since(began).Round(time.Millisecond))
	primary, replica := s.Primary(), s.Replica()
	if s.MasterName() == "" {
		t.Error("MasterName() is empty")
	}
	addrs := s.SentinelAddrs()
	seen := map[string]bool{primary.Addr(): true, replica.Addr(): true}
	for _, a := range addrs {
		if seen[a] {
			t.Errorf("SentinelAddrs() = %v holds %s twice, or a server's address (%s, %s)", addrs, a, primary.Addr(), replica.Addr())
		}
		seen[a] = true
	}
	if len(addrs) != 3 {
		t.Fatalf("SentinelAddrs() = %v, want 3", addrs)
	}
	for i, sn := range s.Sentinels() {
		if sn.Addr() != addrs[i] {
			t.Errorf("Sentinels()[%d] is %s, SentinelAddrs()[%d] %s", i, sn.Addr(), i, addrs[i])
		}
		if info := doString(t, sn, "INFO", "server"); infoField(info, "redis_mode") != "sentinel" {
			t.Errorf("%s is not a sentinel: redis_mode:%s", sn.Addr(), infoField(info, "redis_mode"))
		}
	}
	if addr, err := s.MasterAddr(); err != nil || addr != primary.Addr() {
		t.Errorf("MasterAddr() = %q, %v; want the primary's, %s", addr, err, primary.Addr())
	}
	if r := role(t, primary); r != "master" {
		t.Errorf("the primary's role is %s", r)
	}
	if r := role(t, replica); r != "slave" {
		t.Errorf("the replica's role is %s", r)
	}

	do(t, primary, "SET", "k", "v")
	if n, err := do(t, primary, "WAIT", "1", "5000").Int(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %d, %v; want the replica's acknowledgement", n, err)
	}
	if err := s.KillPrimary(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	promoted, err := s.WaitFailover(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the sentinels reported the promoted replica %v after the kill", time.Since(killed).Round(time.Millisecond))
	if promoted != replica || s.Primary() != replica || s.Replica() != primary {
		t.Errorf("after the failover Primary() is %s and Replica() %s, want %s and %s", s.Primary().Addr(), s.Replica().Addr(), replica.Addr(), primary.Addr())
	}
	if addr, err := s.MasterAddr(); err != nil || addr != replica.Addr() {
		t.Errorf("MasterAddr() after the failover = %q, %v; want %s", addr, err, replica.Addr())
	}
	if got := doString(t, promoted, "GET", "k"); got != "v" {
		t.Errorf("GET k on the promoted replica = %q, want v", got)
	}
	do(t, promoted, "SET", "k2", "v2")
	if _, err := s.WaitFailover(100 * time.Millisecond); err == nil {
		t.Error("a second WaitFailover, with no failover under way, succeeded")
	}
}

// TestSentinelOptions checks that StartSentinel's options reach the
// primary and the replica, and that it rejects WithTLS.
func TestSentinelOptions(t *testing.T) {
	t.Parallel()
	s := StartSentinel(t, WithArgs("--maxmemory", "10mb"))
	for _, srv := range []*Server{s.Primary(), s.Replica()} {
		got := do(t, srv, "CONFIG", "GET", "maxmemory")
		if fields, err := got.Strings(); err != nil || !slices.Equal(fields, []string{"maxmemory", "10485760"}) {
			t.Errorf("CONFIG GET maxmemory on %s = %v, want 10485760", srv.Addr(), got)
		}
	}
	_, err := startSentinel([]Option{WithTLS(NewCA(t, "test CA"))}, t.Logf)
	if err == nil || !strings.Contains(err.Error(), "WithTLS") {
		t.Errorf("startSentinel with WithTLS: %v, want an error naming WithTLS", err)
	}
}
