//go:build unix

package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/redistest/spawn"
)

// Timeouts. Each is generous: a slow machine should make a test slower,
// not flaky.
const (
	readyTimeout  = 60 * time.Second       // from fork to a query answered
	stopTimeout   = 10 * time.Second       // from SIGINT to SIGKILL in Stop
	probeTimeout  = 2 * time.Second        // per readiness probe; a miss is retried
	pollInterval  = 20 * time.Millisecond  // between readiness probes
	startAttempts = 5                      // fresh ports tried by Start
	restartTries  = 10                     // binds of the same port tried by Restart
	restartPause  = 200 * time.Millisecond // between those binds
)

// ErrStopped is returned by [Server.Kill] and [Server.Stop] on a server
// that is not running.
var ErrStopped = errors.New("pgtest: server is stopped")

// Option configures [Start].
type Option interface{ apply(*config) }

type config struct{ settings []string }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithSetting sets a server setting on postgres's command line (-c
// name=value), such as WithSetting("max_connections", "5"). Settings
// follow pgtest's own and win over them, except port,
// listen_addresses and unix_socket_directories, which pgtest owns: Start
// fails the test if an option sets them.
func WithSetting(name, value string) Option {
	return optionFunc(func(c *config) { c.settings = append(c.settings, name+"="+value) })
}

// owned are the settings pgtest sets and relies on.
var owned = []string{"port", "listen_addresses", "unix_socket_directories"}

// Server is one postgres process started by [Start]. Its methods are
// safe for concurrent use.
type Server struct {
	dir  string // the server's directory: data/ and the log
	port int
	args []string            // postgres's arguments, the same for every start
	cred *syscall.Credential // whom the server runs as; nil: the test's user

	mu     sync.Mutex
	proc   *process // nil while stopped
	closed bool
}

// process is one run of postgres.
type process struct{ *spawn.Process }

// Start starts a PostgreSQL server of the test's own on a free port of
// 127.0.0.1 and waits until it answers a query. Its one database,
// "postgres", trusts every connection from 127.0.0.1 as the superuser
// "postgres". t.Cleanup stops it by PID and removes its directory. Start
// fails the test if the binaries are missing or the server is not ready
// within a minute, quoting its log.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s, err := New(opts...)
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
func New(opts ...Option) (*Server, error) {
	var cfg config
	for _, o := range opts {
		o.apply(&cfg)
	}
	for _, s := range cfg.settings {
		name, _, _ := strings.Cut(s, "=")
		for _, o := range owned {
			if strings.EqualFold(name, o) {
				return nil, fmt.Errorf("pgtest: WithSetting may not set %s", o)
			}
		}
	}
	var s *Server
	var err error
	for range startAttempts {
		if s, err = start(cfg); err == nil || !errors.Is(err, errPortInUse) {
			break
		}
	}
	return s, err
}

// errPortInUse marks a start that failed because another process took
// the port first; Start tries a fresh one.
var errPortInUse = errors.New("pgtest: port in use")

// errHeld marks a restart that failed because a killed run's backends
// still hold its shared memory; Restart tries again.
var errHeld = errors.New("pgtest: the previous run's shared memory is still held")

func start(cfg config) (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	tmplData, cred, err := template(bin)
	if err != nil {
		return nil, err
	}
	port, err := spawn.FreePort()
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	dir, err := spawn.Copy("pgtest-", tmplData)
	if err != nil {
		return nil, fmt.Errorf("pgtest: the initialised cluster: %w", err)
	}
	s := &Server{dir: dir, port: port, cred: cred}
	data := filepath.Join(dir, "data")
	if err := s.chown(dir); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s.args = []string{filepath.Join(bin, "postgres"), "-D", data,
		"-c", "port=" + strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=" + dir,
		"-c", "fsync=off", "-c", "full_page_writes=off",
	}
	for _, set := range cfg.settings {
		s.args = append(s.args, "-c", set)
	}
	if err := s.launch(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// binDir finds the directory of postgres and initdb.
func binDir() (string, error) {
	if p, err := exec.LookPath("postgres"); err == nil {
		return filepath.Dir(p), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(dirs) - 1; i >= 0; i-- { // the newest version first
		if _, err := os.Stat(filepath.Join(dirs[i], "postgres")); err == nil {
			return dirs[i], nil
		}
	}
	return "", errors.New("pgtest: postgres not found on PATH or under /usr/lib/postgresql/*/bin; install it with: apt-get install postgresql")
}

// tmpl is the cluster initdb made once for the test binary, which every
// server copies.
var tmpl struct {
	once sync.Once
	data string
	cred *syscall.Credential
	err  error
}

// template returns the binary's initialised cluster, running initdb on
// first use. Its directory lives as long as the test binary's temporary
// files do: the package has no hook at the binary's exit.
func template(bin string) (data string, cred *syscall.Credential, err error) {
	tmpl.once.Do(func() {
		tmpl.err = errors.New("pgtest: initdb panicked")
		tmpl.cred, tmpl.err = credential()
		if tmpl.err != nil {
			return
		}
		dir, err := os.MkdirTemp("", "pgtest-template-")
		if err != nil {
			tmpl.err = fmt.Errorf("pgtest: %w", err)
			return
		}
		s := &Server{cred: tmpl.cred}
		if tmpl.err = s.chown(dir); tmpl.err != nil {
			return
		}
		tmpl.data = filepath.Join(dir, "data")
		cmd := exec.Command(filepath.Join(bin, "initdb"), "-D", tmpl.data, "-U", "postgres",
			"--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: tmpl.cred}
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			tmpl.err = fmt.Errorf("pgtest: initdb: %v\n%s", err, out)
		}
	})
	return tmpl.data, tmpl.cred, tmpl.err
}

// credential returns whom to run PostgreSQL as: nil (the test's own user)
// unless the test runs as root, which PostgreSQL refuses; then the user
// "postgres", or "nobody".
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 == nil && err2 == nil && uid != 0 {
			return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
		}
	}
	return nil, errors.New("pgtest: running as root, and found neither the user postgres nor nobody to run PostgreSQL as")
}

// chown gives dir, and everything in it, to the server's user.
func (s *Server) chown(dir string) error {
	if s.cred == nil {
		return nil
	}
	err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(s.cred.Uid), int(s.cred.Gid))
	})
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	return nil
}

// launch starts postgres and waits until it answers.
func (s *Server) launch() error {
	log, err := os.OpenFile(s.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	defer log.Close()
	from, _ := log.Seek(0, 2)
	cmd := exec.Command(s.args[0], s.args[1:]...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	sp, err := spawn.Start(cmd)
	if err != nil {
		return fmt.Errorf("pgtest: start postgres: %w", err)
	}
	p := &process{sp}
	if err := s.waitReady(p, from); err != nil {
		p.kill()
		return err
	}
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()
	return nil
}

// waitReady polls until the server on s.port answers a query and names
// s's data directory as its own, so that another process's server that
// took the port is never mistaken for it.
func (s *Server) waitReady(p *process, logFrom int64) error {
	want := filepath.Join(s.dir, "data")
	err := p.WaitReady(readyTimeout, pollInterval, func() error { return s.probe(want) })
	if err == nil {
		return nil
	}
	log := s.logSince(logFrom)
	switch {
	case !errors.Is(err, spawn.ErrExited):
	case strings.Contains(log, "Address already in use"):
		return fmt.Errorf("%w: %d", errPortInUse, s.port)
	case strings.Contains(log, "pre-existing shared memory block"):
		return errHeld
	}
	return fmt.Errorf("pgtest: postgres on port %d: %w\n%s", s.port, err, log)
}

// probe connects once and checks that the server's data directory is
// want.
func (s *Server) probe(want string) error {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var dir string
	if err := conn.QueryRow(ctx, "SELECT current_setting('data_directory')").Scan(&dir); err != nil {
		return err
	}
	if dir != want {
		return fmt.Errorf("pgtest: the server on port %d serves %s, not %s", s.port, dir, want)
	}
	return nil
}

func (s *Server) logPath() string { return filepath.Join(s.dir, "postgres.log") }

// logSince returns the log written from offset from on, at most its last
// 4 KiB.
func (s *Server) logSince(from int64) string { return spawn.Tail(s.logPath(), from) }

// URL returns a connection string for the server's database "postgres"
// as the superuser "postgres", without TLS.
func (s *Server) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
}

// Port returns the server's port.
func (s *Server) Port() int { return s.port }

// PID returns the postmaster's process id, or 0 while the server is
// stopped.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.PID()
}

// Kill kills the server and its backends at once (SIGKILL, by PID) and
// waits until the postmaster is reaped: what a crash or an out-of-memory
// kill does. Connections open to it break. Outside Linux only the
// postmaster is killed, and its backends exit when they notice.
func (s *Server) Kill() error { return s.halt(false) }

// Stop shuts the server down fast (SIGINT: backends are terminated,
// clients get an admin-shutdown error), killing it if it has not exited
// within 10 seconds.
func (s *Server) Stop() error { return s.halt(true) }

func (s *Server) halt(graceful bool) error {
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	if p == nil {
		return ErrStopped
	}
	if graceful {
		p.Signal(syscall.SIGINT)
		if p.WaitFor(stopTimeout) {
			return nil
		}
	}
	return p.kill()
}

// kill kills the postmaster and its backends at once and waits until the
// postmaster is reaped and, for a while, until the backends are gone.
// The postmaster is stopped first (SIGSTOP), so that it forks no backend
// while its children are listed.
func (p *process) kill() error {
	pid := p.PID()
	syscall.Kill(pid, syscall.SIGSTOP)
	backends := spawn.Children(pid)
	for _, c := range backends {
		syscall.Kill(c, syscall.SIGKILL)
	}
	if err := p.Kill(); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	// The backends, orphaned, are reaped by whoever adopts them; a
	// restart before they are gone finds their shared memory in use,
	// and retries (errHeld).
	deadline := time.Now().Add(stopTimeout)
	for _, c := range backends {
		for syscall.Kill(c, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(pollInterval)
		}
	}
	return nil
}

// Restart starts a stopped server again on the same port and directory,
// keeping its data, and waits until it answers. It retries for a while if
// the port is not yet free.
func (s *Server) Restart() error {
	s.mu.Lock()
	running, closed := s.proc != nil, s.closed
	s.mu.Unlock()
	switch {
	case closed:
		return errors.New("pgtest: server is closed")
	case running:
		return errors.New("pgtest: server is running")
	}
	var err error
	for range restartTries {
		if err = s.launch(); err == nil || !errors.Is(err, errPortInUse) && !errors.Is(err, errHeld) {
			return err
		}
		time.Sleep(restartPause)
	}
	return err
}

// Close stops the server for good, by PID, and removes its directory.
// [Start] closes its server when the test ends.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	if err := s.halt(false); err != nil && !errors.Is(err, ErrStopped) {
		return err
	}
	return os.RemoveAll(s.dir)
}
