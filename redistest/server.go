package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/redistest/spawn"
)

// Timeouts and retry counts. Each is generous: a slow CI machine should make
// a test slower, not flaky.
const (
	readyTimeout   = 10 * time.Second       // from fork to +PONG
	stopTimeout    = 5 * time.Second        // from SIGTERM to SIGKILL in Stop
	dialTimeout    = 2 * time.Second        // per connection attempt
	ioTimeout      = 10 * time.Second       // per command in Do
	probeTimeout   = 250 * time.Millisecond // per readiness probe; a miss is retried
	pollInterval   = 20 * time.Millisecond  // between readiness probes
	startAttempts  = 5                      // fresh ports tried by Start
	restartTries   = 10                     // binds of the same port tried by Restart
	restartBackoff = 200 * time.Millisecond // between those binds
	maxIdleConns   = 4                      // connections Do keeps per server
	logTailLines   = 20                     // log lines quoted in an error
)

// systemPort is the port of the machine's own Redis, which this package never
// starts a server on and never connects to.
const systemPort = 6379

// installHint names the Debian packages that provide the binaries.
const installHint = "install them with: apt-get install redis-server redis-tools"

var (
	// ErrStopped is returned by [Server.Do] while the server is stopped,
	// instead of dialling a port that another process may have taken.
	ErrStopped = errors.New("redistest: server is stopped")

	// ErrShared is returned by [Server.Kill], [Server.Stop] and
	// [Server.Restart] on a server from [Shared] or [SharedCluster]:
	// other tests are using it. Start a server of your own for fault tests.
	ErrShared = errors.New("redistest: server is shared by the test binary")

	// ErrClosed is returned by [Server.Restart] after the server's final
	// stop, when its directory is gone.
	ErrClosed = errors.New("redistest: server is closed")

	// errPortInUse marks a start that failed because the port was taken
	// between choosing it and binding it; Start retries with a new one.
	errPortInUse = errors.New("port in use")
)

// Option configures [Start] or [StartCluster].
type Option interface {
	apply(*config)
}

type config struct {
	args       []string
	tls        *CA    // WithTLS's
	clientAuth bool   // WithClientAuth's
	sentinel   string // a sentinel's configuration file (StartSentinel's), or ""
	err        error  // the first option that could not be used
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithArgs adds redis-server command-line arguments, such as
// WithArgs("--maxmemory", "10mb", "--maxmemory-policy", "allkeys-lru").
// They follow the package's own arguments, so they win where Redis takes the
// last value of a directive (--cluster-node-timeout, for one, may be
// changed). They must not set --port, --bind, --dir, --logfile, --daemonize,
// --cluster-enabled, --cluster-config-file or --tls-port, which the
// package owns ([WithTLS] sets the last); Start fails the test if they
// do. Several WithArgs add up.
func WithArgs(args ...string) Option {
	args = append([]string(nil), args...)
	return optionFunc(func(c *config) { c.args = append(c.args, args...) })
}

// WithUser adds an ACL user to the server: name, enabled, with password
// and rules as ACL SETUSER takes them, such as "~*", "+@all", "-@write"
// or "~other:*". The default user, whom the package's own connections
// use, keeps every permission and no password; name may not be
// "default". Neither name nor password may be empty or hold a space (a
// user is one line of redis-server's configuration). Several WithUser
// add up.
func WithUser(name, password string, rules ...string) Option {
	return optionFunc(func(c *config) {
		if name == "" || password == "" || strings.ContainsAny(name+password, " \t\n") || name == "default" {
			c.fail(fmt.Errorf("redistest: WithUser(%q, %q): want a name other than default and a password, neither empty nor with a space", name, password))
			return
		}
		c.args = append(append(c.args, "--user", name, "on", ">"+password), rules...)
	})
}

// fail records the first option that could not be used.
func (c *config) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// reservedArgs are the directives the package sets and relies on.
var reservedArgs = []string{
	"--port", "--bind", "--dir", "--logfile", "--daemonize",
	"--cluster-enabled", "--cluster-config-file", "--tls-port",
}

func newConfig(opts []Option) (config, error) {
	var c config
	for _, o := range opts {
		o.apply(&c)
	}
	if c.err != nil {
		return c, c.err
	}
	if c.clientAuth && c.tls == nil {
		return c, errors.New("redistest: WithClientAuth needs WithTLS")
	}
	for _, a := range c.args {
		for _, r := range reservedArgs {
			if strings.EqualFold(a, r) {
				return c, fmt.Errorf("redistest: WithArgs may not set %s", r)
			}
		}
	}
	return c, nil
}

// Server is one redis-server process started by this package, listening on
// 127.0.0.1 with no persistence. Its methods are safe for concurrent use.
type Server struct {
	port    int
	tlsPort int      // WithTLS's port, or 0
	dir     string   // working directory, holds the logs and nodes.conf
	bin     string   // absolute path of redis-server
	args    []string // redis-server's arguments, the same for every start
	cluster *Cluster // the cluster the server is a node of, or nil
	shared  bool     // from Shared or SharedCluster: no Kill, Stop, Restart

	life sync.Mutex // serialises Kill, Stop, Restart and close

	mu     sync.Mutex // guards the fields below
	proc   *process   // the running process, or nil while stopped
	closed bool       // finally stopped; dir is removed
	idle   []*conn    // connections to proc, for Do
}

// process is one run of redis-server.
type process struct {
	*spawn.Process
	logStart []int64 // the size of each of logNames before this run
}

// kill sends SIGKILL and waits until the process is reaped.
func (p *process) kill() error {
	if err := p.Kill(); err != nil {
		return fmt.Errorf("redistest: %w", err)
	}
	return nil
}

// Start starts a redis-server of the test's own on a free port and waits
// until it answers PING. t.Cleanup stops it by PID and removes its
// directory; the cleanup is quiet if the test already stopped the server.
// Start fails the test if redis-server is not installed or does not become
// ready within 10 seconds, quoting the server's log.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s, err := startServer(opts, false, false)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		if err := s.close(); err != nil {
			t.Errorf("%v", err)
		}
	})
	return s
}

// startServer starts a server on a fresh port, retrying with another port
// when the chosen one is taken before redis-server binds it.
func startServer(opts []Option, clusterNode, shared bool) (*Server, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if cfg.tls != nil && clusterNode {
		return nil, errors.New("redistest: WithTLS is for Start, not for a cluster's nodes")
	}
	bin, err := lookPath("redis-server")
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		s, err := tryStart(bin, cfg, clusterNode, shared)
		if err == nil || !errors.Is(err, errPortInUse) || attempt == startAttempts {
			return s, err
		}
	}
}

func tryStart(bin string, cfg config, clusterNode, shared bool) (*Server, error) {
	var busOffset []int
	if clusterNode {
		busOffset = []int{clusterBusOffset}
	}
	port, err := spawn.FreePort(busOffset...)
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	s := &Server{
		port:   port,
		dir:    dir,
		bin:    bin,
		args:   append(serverArgs(port, dir, clusterNode), cfg.args...),
		shared: shared,
	}
	if cfg.sentinel != "" {
		// A sentinel's configuration is a file of its own, which it
		// rewrites as it learns; redis-server takes it first.
		conf := filepath.Join(dir, "sentinel.conf")
		if err := os.WriteFile(conf, []byte(cfg.sentinel), 0o600); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("redistest: %w", err)
		}
		s.args = append([]string{conf, "--sentinel"}, s.args...)
	}
	if cfg.tls != nil {
		if err := s.listenTLS(cfg.tls, cfg.clientAuth); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	if err := s.launch(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// serverArgs returns the package's own redis-server arguments.
func serverArgs(port int, dir string, clusterNode bool) []string {
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		// A full sync starts at once rather than waiting 5 s for more
		// replicas; its child process would otherwise outlive a killed
		// server by those seconds, and its stop with it.
		"--repl-diskless-sync-delay", "0",
		"--protected-mode", "no",
		"--daemonize", "no",
		"--dir", dir,
		"--logfile", filepath.Join(dir, "redis.log"),
	}
	if clusterNode {
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", strconv.Itoa(int(clusterNodeTimeout/time.Millisecond)),
		)
	}
	return args
}

// lookPath finds a binary on PATH, naming the packages to install if it is
// missing.
func lookPath(name string) (string, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("redistest: %s not found on PATH (%w); %s", name, err, installHint)
	}
	return p, nil
}

// launch starts redis-server with s.args and waits until it is ready.
func (s *Server) launch() error {
	out, err := os.OpenFile(filepath.Join(s.dir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("redistest: %w", err)
	}
	cmd := exec.Command(s.bin, s.args...)
	cmd.Dir = s.dir
	// What redis-server prints before it opens its log file, such as a
	// bad argument, lands here.
	cmd.Stdout, cmd.Stderr = out, out
	logStart := s.logSize() // a restart appends to the logs
	sp, err := spawn.Start(cmd)
	out.Close()
	if err != nil {
		return fmt.Errorf("redistest: start redis-server: %w", err)
	}
	p := &process{Process: sp, logStart: logStart}
	if err := s.waitReady(p); err != nil {
		p.kill()
		return err
	}
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()
	return nil
}

// waitReady polls with PING until p answers +PONG. A LOADING error means
// not yet. The answering server must report p's PID, so that a server of
// someone else's that took the port is never mistaken for ours.
func (s *Server) waitReady(p *process) error {
	err := p.WaitReady(readyTimeout, pollInterval, func() error { return s.probe(p.PID()) })
	switch {
	case errors.Is(err, spawn.ErrExited):
		return s.exitError(p)
	case err != nil:
		return fmt.Errorf("redistest: redis-server on port %d: %w\n%s", s.port, err, s.logTail())
	}
	return nil
}

// probe checks once that the server on s.port answers PING and is pid.
func (s *Server) probe(pid int) error {
	c, err := dial(s.Addr(), probeTimeout)
	if err != nil {
		return err
	}
	defer c.nc.Close()
	r, err := c.do([]string{"PING"})
	if err != nil {
		return err
	}
	if str, _ := r.String(); str != "PONG" {
		return fmt.Errorf("PING replied %v", r)
	}
	r, err = c.do([]string{"INFO", "server"})
	if err != nil {
		return err
	}
	info, err := r.String()
	if err != nil {
		return err
	}
	if got := infoField(info, "process_id"); got != strconv.Itoa(pid) {
		return fmt.Errorf("the server on port %d is pid %s, not ours (%d)", s.port, got, pid)
	}
	return nil
}

// exitError describes a server that exited before it was ready. It wraps
// errPortInUse if this run of the server could not bind its port or cluster
// bus port.
func (s *Server) exitError(p *process) error {
	err := fmt.Errorf("redistest: redis-server on port %d exited before it was ready (%v)\n%s",
		s.port, p.State(), s.logTail())
	if strings.Contains(s.logSince(p.logStart), "Address already in use") {
		return fmt.Errorf("%w: %w", errPortInUse, err)
	}
	return err
}

var logNames = []string{"stdout.log", "redis.log"}

// logSize returns the size of each of the server's logs.
func (s *Server) logSize() []int64 {
	sizes := make([]int64, len(logNames))
	for i, name := range logNames {
		if fi, err := os.Stat(filepath.Join(s.dir, name)); err == nil {
			sizes[i] = fi.Size()
		}
	}
	return sizes
}

// logSince returns what the server's logs gained since logSize returned
// start.
func (s *Server) logSince(start []int64) string {
	var b strings.Builder
	for i, name := range logNames {
		data, _ := os.ReadFile(filepath.Join(s.dir, name))
		if start[i] <= int64(len(data)) {
			b.Write(data[start[i]:])
		}
	}
	return b.String()
}

// logTail returns the last lines of the server's output and log file.
func (s *Server) logTail() string {
	var b strings.Builder
	for _, name := range logNames {
		data, err := os.ReadFile(filepath.Join(s.dir, name))
		if err != nil || len(data) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		lines = lines[max(0, len(lines)-logTailLines):]
		fmt.Fprintf(&b, "--- last %d lines of %s:\n%s\n", len(lines), filepath.Join(s.dir, name), strings.Join(lines, "\n"))
	}
	if b.Len() == 0 {
		return "(the server wrote no log)"
	}
	return b.String()
}

// Addr returns the server's address, "127.0.0.1:PORT".
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Port returns the server's TCP port. It does not change on Restart.
func (s *Server) Port() int { return s.port }

// TLSAddr returns the address of the server's TLS port, "127.0.0.1:PORT",
// for a server started [WithTLS], or "" for another. It does not change
// on Restart.
func (s *Server) TLSAddr() string {
	if s.tlsPort == 0 {
		return ""
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.tlsPort))
}

// Dir returns the server's working directory, which holds its log
// (redis.log) and, for a cluster node, nodes.conf. It is removed when the
// server is finally stopped.
func (s *Server) Dir() string { return s.dir }

// PID returns the process ID of the running redis-server, or 0 while the
// server is stopped or after it has exited on its own. It changes on
// Restart.
func (s *Server) PID() int {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p == nil || p.Exited() {
		return 0
	}
	return p.PID()
}

// Kill sends SIGKILL to the server's process and waits until it is reaped.
// Every key is lost: there is no persistence. Killing a stopped server does
// nothing and returns nil. On a shared server Kill returns [ErrShared].
func (s *Server) Kill() error {
	if s.shared {
		return fmt.Errorf("%w: Kill", ErrShared)
	}
	s.life.Lock()
	defer s.life.Unlock()
	return s.halt(false)
}

// Stop sends SIGTERM to the server's process and waits up to 5 seconds for it
// to exit, then sends SIGKILL; either way it waits until the process is
// reaped. It returns an error if SIGKILL was needed. Stopping a stopped
// server does nothing and returns nil. On a shared server Stop returns
// [ErrShared].
func (s *Server) Stop() error {
	if s.shared {
		return fmt.Errorf("%w: Stop", ErrShared)
	}
	s.life.Lock()
	defer s.life.Unlock()
	return s.halt(true)
}

// halt stops the process, politely if graceful. The caller holds s.life.
func (s *Server) halt(graceful bool) error {
	s.mu.Lock()
	p, idle := s.proc, s.idle
	s.proc, s.idle = nil, nil
	s.mu.Unlock()
	for _, c := range idle {
		c.nc.Close()
	}
	if p == nil {
		return nil
	}
	if graceful && p.Signal(syscall.SIGTERM) == nil {
		if p.WaitFor(stopTimeout) {
			return nil
		}
		if err := p.kill(); err != nil {
			return err
		}
		return fmt.Errorf("redistest: redis-server pid %d did not exit within %v of SIGTERM and was killed",
			p.PID(), stopTimeout)
	}
	return p.kill()
}

// Restart starts the server again on the same port with the same arguments
// and directory, killing it first if it is running, and waits until it
// answers PING. A cluster node rejoins with its slots (its nodes.conf
// survives) but without its keys, and Restart waits until [Cluster.WaitOK]
// succeeds. If another process has taken the port meanwhile, Restart retries
// for about 2 seconds and then fails. On a shared server Restart returns
// [ErrShared]; after the test's cleanup it returns [ErrClosed].
func (s *Server) Restart() error {
	if s.shared {
		return fmt.Errorf("%w: Restart", ErrShared)
	}
	if err := s.relaunch(); err != nil {
		return err
	}
	if s.cluster != nil {
		return s.cluster.WaitOK()
	}
	return nil
}

// relaunch is Restart but for the cluster's recovery.
func (s *Server) relaunch() error {
	s.life.Lock()
	defer s.life.Unlock()
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if err := s.halt(false); err != nil {
		return err
	}
	var err error
	for range restartTries {
		if err = s.launch(); !errors.Is(err, errPortInUse) {
			break
		}
		time.Sleep(restartBackoff)
	}
	return err
}

// close is the final stop: kill the process and remove the directory.
func (s *Server) close() error {
	s.life.Lock()
	defer s.life.Unlock()
	err := s.halt(false)
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	if rmErr := os.RemoveAll(s.dir); rmErr != nil {
		err = errors.Join(err, fmt.Errorf("redistest: %w", rmErr))
	}
	return err
}

// Do sends one command and returns its reply, over a connection kept from
// an earlier call or a new one. An error reply is returned as a
// *[RedisError]; a cluster node's MOVED and ASK are such errors, not
// followed. While the server is stopped Do returns [ErrStopped]. Each
// command has 10 seconds to complete, so a blocking command must time out
// sooner. Do is safe for concurrent use; concurrent calls use separate
// connections.
func (s *Server) Do(args ...string) (Reply, error) {
	if len(args) == 0 {
		return Reply{}, errors.New("redistest: Do needs a command")
	}
	c, err := s.conn()
	if err != nil {
		return Reply{}, err
	}
	r, err := c.do(args)
	if err != nil {
		c.nc.Close()
		return Reply{}, fmt.Errorf("redistest: %s on %s: %w", args[0], s.Addr(), err)
	}
	s.putConn(c)
	if r.kind == KindError {
		return Reply{}, &RedisError{Msg: r.str}
	}
	return r, nil
}

// conn returns an idle connection to the running process or dials one.
func (s *Server) conn() (*conn, error) {
	s.mu.Lock()
	p := s.proc
	if p == nil {
		s.mu.Unlock()
		return nil, ErrStopped
	}
	if n := len(s.idle); n > 0 {
		c := s.idle[n-1]
		s.idle = s.idle[:n-1]
		s.mu.Unlock()
		return c, nil
	}
	s.mu.Unlock()
	c, err := dial(s.Addr(), ioTimeout)
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	c.proc = p
	return c, nil
}

// putConn keeps c for the next Do if it belongs to the running process.
func (s *Server) putConn(c *conn) {
	s.mu.Lock()
	keep := c.proc == s.proc && len(s.idle) < maxIdleConns
	if keep {
		s.idle = append(s.idle, c)
	}
	s.mu.Unlock()
	if !keep {
		c.nc.Close()
	}
}

// conn is one client connection.
type conn struct {
	nc      net.Conn
	r       *bufio.Reader
	w       *bufio.Writer
	timeout time.Duration // for each command
	proc    *process      // the process dialled, so Do never reuses c after a restart
}

// dial connects to addr; each command on the connection has timeout to
// complete.
func dial(addr string, timeout time.Duration) (*conn, error) {
	nc, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		return nil, err
	}
	return &conn{nc: nc, r: bufio.NewReader(nc), w: bufio.NewWriter(nc), timeout: timeout}, nil
}

// do sends one command and reads its reply, within c.timeout.
func (c *conn) do(args []string) (Reply, error) {
	if err := c.nc.SetDeadline(time.Now().Add(c.timeout)); err != nil {
		return Reply{}, err
	}
	if err := writeCommand(c.w, args); err != nil {
		return Reply{}, err
	}
	return readReply(c.r)
}

// infoField returns the value of "name:value" in an INFO or CLUSTER INFO
// reply, or "" if absent.
func infoField(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
