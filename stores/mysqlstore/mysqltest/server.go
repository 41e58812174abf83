//go:build unix

package mysqltest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // the driver of DSN's connections

	"github.com/sluicehq/sluice/redistest/spawn"
)

// Timeouts. Each is generous: a slow machine should make a test slower,
// not flaky.
const (
	readyTimeout  = 60 * time.Second
	probeTimeout  = 2 * time.Second
	pollInterval  = 20 * time.Millisecond
	startAttempts = 5
	restartTries  = 10                     // binds of the same port tried by Restart
	restartPause  = 200 * time.Millisecond // between those binds
)

// ErrStopped is returned by [Server.Kill] on a server that is not
// running.
var ErrStopped = errors.New("mysqltest: server is stopped")

// Server is one mariadbd process started by [Start]. Its methods are
// safe for concurrent use.
type Server struct {
	dir  string // the server's directory: data/, the socket and the log
	port int
	bin  string // mariadbd

	mu   sync.Mutex
	proc *spawn.Process // nil once killed
}

// Start starts a server of the test's own on a free port of 127.0.0.1
// and waits until it answers a query. Its user "root" has no password
// and may connect from 127.0.0.1; its database "sluice" is empty.
// t.Cleanup kills it by PID and removes its directory. Start fails the
// test if the binaries are missing or the server is not ready within a
// minute, quoting its log.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// New starts a server as [Start] does, for code that has no testing.TB,
// such as a TestMain that starts a server for the package's Examples; the
// caller stops it with [Server.Close].
func New() (*Server, error) {
	var s *Server
	var err error
	for range startAttempts {
		if s, err = start(); err == nil || !errors.Is(err, errPortInUse) {
			break
		}
	}
	return s, err
}

// Close kills the server, by PID, if it runs, and removes its directory.
// [Start] closes its server when the test ends.
func (s *Server) Close() error {
	if err := s.Kill(); err != nil && !errors.Is(err, ErrStopped) {
		return err
	}
	return os.RemoveAll(s.dir)
}

// errPortInUse marks a start that failed because another process took
// the port first; Start tries a fresh one.
var errPortInUse = errors.New("mysqltest: port in use")

func start() (*Server, error) {
	server, err := exec.LookPath("mariadbd")
	if err != nil {
		if server, err = exec.LookPath("/usr/sbin/mariadbd"); err != nil {
			return nil, errors.New("mysqltest: mariadbd not found on PATH or in /usr/sbin; install it with: apt-get install mariadb-server")
		}
	}
	tmplData, err := template()
	if err != nil {
		return nil, err
	}
	port, err := spawn.FreePort()
	if err != nil {
		return nil, fmt.Errorf("mysqltest: %w", err)
	}
	dir, err := spawn.Copy("mysqltest-", tmplData)
	if err != nil {
		return nil, fmt.Errorf("mysqltest: the installed data directory: %w", err)
	}
	s := &Server{dir: dir, port: port, bin: server}
	if err := s.launch(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// launch starts mariadbd on s's port and directory and waits until it
// answers.
func (s *Server) launch() error {
	data := filepath.Join(s.dir, "data")
	args := []string{"--no-defaults", "--datadir=" + data,
		"--port=" + strconv.Itoa(s.port), "--bind-address=127.0.0.1",
		"--socket=" + filepath.Join(s.dir, "sock"), "--pid-file=" + filepath.Join(s.dir, "pid"),
		"--skip-log-bin", "--skip-name-resolve", "--innodb-flush-log-at-trx-commit=0",
		"--innodb-buffer-pool-size=32M", "--max-connections=200",
	}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	log, err := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("mysqltest: %w", err)
	}
	defer log.Close()
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = log, log
	p, err := spawn.Start(cmd)
	if err != nil {
		return fmt.Errorf("mysqltest: start mariadbd: %w", err)
	}
	if err := s.waitReady(p, data); err != nil {
		p.Kill()
		return err
	}
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()
	return nil
}

// Restart starts a killed server again on the same port and directory,
// keeping its data, and waits until it answers. It retries for a while if
// the port is not yet free.
func (s *Server) Restart() error {
	s.mu.Lock()
	running := s.proc != nil
	s.mu.Unlock()
	if running {
		return errors.New("mysqltest: server is running")
	}
	var err error
	for range restartTries {
		if err = s.launch(); err == nil || !errors.Is(err, errPortInUse) {
			return err
		}
		time.Sleep(restartPause)
	}
	return err
}

// tmpl is the data directory mariadb-install-db made once for the test
// binary, which every server copies.
var tmpl struct {
	once sync.Once
	data string
	err  error
}

// template returns the binary's installed data directory, installing it
// on first use. It lives as long as the test binary's temporary files
// do: the package has no hook at the binary's exit.
func template() (string, error) {
	tmpl.once.Do(func() {
		dir, err := os.MkdirTemp("", "mysqltest-template-")
		if err != nil {
			tmpl.err = fmt.Errorf("mysqltest: %w", err)
			return
		}
		tmpl.data = filepath.Join(dir, "data")
		args := []string{"--no-defaults", "--datadir=" + tmpl.data, "--auth-root-authentication-method=normal", "--skip-test-db"}
		if os.Geteuid() == 0 {
			args = append(args, "--user=root")
		}
		install, err := exec.LookPath("mariadb-install-db")
		if err != nil {
			tmpl.err = errors.New("mysqltest: mariadb-install-db not found; install it with: apt-get install mariadb-server")
			return
		}
		cmd := exec.Command(install, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			tmpl.err = fmt.Errorf("mysqltest: mariadb-install-db: %v\n%s", err, out)
		}
	})
	return tmpl.data, tmpl.err
}

// waitReady polls until the server on s.port answers a query and names
// data as its data directory, then creates the database "sluice".
func (s *Server) waitReady(p *spawn.Process, data string) error {
	err := p.WaitReady(readyTimeout, pollInterval, func() error { return s.probe(data) })
	if err == nil {
		return nil
	}
	log := s.log()
	if errors.Is(err, spawn.ErrExited) && strings.Contains(log, "Address already in use") {
		return fmt.Errorf("%w: %d", errPortInUse, s.port)
	}
	return fmt.Errorf("mysqltest: mariadbd on port %d: %w\n%s", s.port, err, log)
}

// probe connects once, checks the data directory and creates the
// database.
func (s *Server) probe(data string) error {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	db, err := sql.Open("mysql", fmt.Sprintf("root@tcp(127.0.0.1:%d)/", s.port))
	if err != nil {
		return err
	}
	defer db.Close()
	var dir string
	if err := db.QueryRowContext(ctx, "SELECT @@datadir").Scan(&dir); err != nil {
		return err
	}
	if filepath.Clean(dir) != data {
		return fmt.Errorf("mysqltest: the server on port %d serves %s, not %s", s.port, dir, data)
	}
	_, err = db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS sluice")
	return err
}

// log returns the server's log, at most its last 4 KiB.
func (s *Server) log() string { return spawn.Tail(filepath.Join(s.dir, "server.log"), 0) }

// DSN returns a data source name for go-sql-driver/mysql: the database
// "sluice" as root, over TCP, with interpolateParams=true, so that a
// statement with arguments is one round trip, not a prepare and an
// execute.
func (s *Server) DSN() string {
	return fmt.Sprintf("root@tcp(127.0.0.1:%d)/sluice?interpolateParams=true", s.port)
}

// Port returns the server's port.
func (s *Server) Port() int { return s.port }

// Kill kills the server at once (SIGKILL, by PID) and waits until it is
// reaped: what a crash does. Connections open to it break.
func (s *Server) Kill() error {
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	if p == nil {
		return ErrStopped
	}
	if err := p.Kill(); err != nil {
		return fmt.Errorf("mysqltest: %w", err)
	}
	return nil
}
