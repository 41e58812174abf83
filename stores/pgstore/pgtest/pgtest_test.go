package pgtest_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/stores/pgstore/pgtest"
)

// query runs a one-value query on a fresh connection to s.
func query(t *testing.T, s *pgtest.Server, sql string) (string, error) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.URL())
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var v string
	err = conn.QueryRow(ctx, sql).Scan(&v)
	return v, err
}

// TestKillRestart kills a server, finds it gone, restarts it on the same
// port and finds its data kept.
func TestKillRestart(t *testing.T) {
	t.Parallel()
	s := pgtest.Start(t, pgtest.WithSetting("max_connections", "7"))
	if v, err := query(t, s, "SHOW max_connections"); err != nil || v != "7" {
		t.Fatalf("SHOW max_connections = %q, %v; want 7", v, err)
	}
	if _, err := query(t, s, "CREATE TABLE kept (x int)"); err != nil && err.Error() != "no rows in result set" {
		t.Fatal(err)
	}
	// Below the ephemeral range, no client's connection can hold the port
	// while the server is down.
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			if low, _ := strconv.Atoi(f[0]); low > 11000 && s.Port() >= low {
				t.Errorf("port %d is in the ephemeral range, from %d", s.Port(), low)
			}
		}
	}
	pid := s.PID()
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if s.PID() != 0 {
		t.Errorf("PID after Kill = %d, want 0", s.PID())
	}
	if _, err := query(t, s, "SELECT 1::text"); err == nil {
		t.Fatal("a query after Kill succeeded")
	}
	if err := s.Kill(); !errors.Is(err, pgtest.ErrStopped) {
		t.Errorf("Kill of a stopped server = %v, want ErrStopped", err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if s.PID() == pid || s.PID() == 0 {
		t.Errorf("PID after Restart = %d, before %d; want a new one", s.PID(), pid)
	}
	if v, err := query(t, s, "SELECT count(*)::text FROM kept"); err != nil || v != "0" {
		t.Errorf("the table made before the kill: %q, %v", v, err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
}

// TestSettingOwned checks that pgtest keeps its own settings.
func TestSettingOwned(t *testing.T) {
	t.Parallel()
	ft := &fakeT{T: t}
	func() {
		defer func() { recover() }()
		pgtest.Start(ft, pgtest.WithSetting("port", "5432"))
	}()
	if !ft.fataled {
		t.Error("Start with WithSetting(port) did not fail")
	}
}

// fakeT records a Fatal and stops the goroutine by panicking, which the
// caller recovers.
type fakeT struct {
	*testing.T
	fataled bool
}

func (f *fakeT) Fatalf(string, ...any) { f.fataled = true; panic("fatal") }
func (f *fakeT) Fatal(...any)          { f.fataled = true; panic("fatal") }
