package compare

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/redistest/spawn"
)

// Timeouts of the harness. Each is generous: a loaded machine should make
// a test slower, not flaky.
const (
	readyTimeout = 30 * time.Second       // from fork until the server is ready
	stopTimeout  = 5 * time.Second        // from SIGTERM until SIGKILL
	probeTimeout = 500 * time.Millisecond // per readiness probe
	pollInterval = 20 * time.Millisecond  // between readiness probes
	startTries   = 3                      // fresh ports tried when a port was taken
	logTailLines = 30                     // log lines quoted in an error
)

// Server is a rate-limit server process that [StartPeer] or [StartSluice]
// started: a child of the test binary listening on 127.0.0.1 only. Its
// methods are safe for concurrent use.
type Server struct {
	// Name says which server it is, such as "envoyproxy/ratelimit" or
	// "sluice-serve".
	Name string
	// GRPCAddr is the address of its RLS gRPC service, "127.0.0.1:PORT".
	GRPCAddr string
	// HTTPAddr is the address of its HTTP port (health check),
	// "127.0.0.1:PORT".
	HTTPAddr string

	logPath string
	proc    *spawn.Process

	stopOnce sync.Once
	stopErr  error
}

// PID returns the server's process ID.
func (s *Server) PID() int { return s.proc.PID() }

// CPU returns the CPU time, user plus system, that the server has used
// since it started, in steps of 10 ms. See [ProcessCPU].
func (s *Server) CPU() (time.Duration, error) { return ProcessCPU(s.PID()) }

// Exited reports whether the server's process has ended.
func (s *Server) Exited() bool { return s.proc.Exited() }

// Stop sends SIGTERM to the server's process, by its PID, and waits up to
// 5 seconds for it to exit before sending SIGKILL; either way it returns
// once the process is reaped. It returns an error if SIGKILL was needed.
// Later calls return the first call's result. The test's cleanup calls
// Stop.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() { s.stopErr = s.halt() })
	return s.stopErr
}

func (s *Server) halt() error {
	if s.Exited() {
		return nil
	}
	if err := s.proc.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("compare: SIGTERM to %s (pid %d): %w", s.Name, s.PID(), err)
	}
	if s.proc.WaitFor(stopTimeout) {
		return nil
	}
	if err := s.proc.Kill(); err != nil {
		return fmt.Errorf("compare: SIGKILL to %s: %w", s.Name, err)
	}
	return fmt.Errorf("compare: %s (pid %d) did not exit within %v of SIGTERM and was killed\n%s", s.Name, s.PID(), stopTimeout, s.LogTail())
}

// LogTail returns the last lines the server wrote to its standard output
// and error, for an error message.
func (s *Server) LogTail() string {
	data, err := os.ReadFile(s.logPath)
	if err != nil || len(data) == 0 {
		return "(" + s.Name + " wrote nothing)"
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	lines = lines[max(0, len(lines)-logTailLines):]
	return fmt.Sprintf("--- last %d lines of %s:\n%s", len(lines), s.logPath, strings.Join(lines, "\n"))
}

// launch describes one server to start: its binary, arguments and
// environment for a set of ports, and how to tell that it is ready.
type launch struct {
	name  string
	bin   string
	dir   string                                        // working directory, holds the log
	ports int                                           // free ports to pick
	args  func(ports []int) (args, env []string)        // the command line for those ports
	addrs func(ports []int) (grpcAddr, httpAddr string) // where it listens
	ready func(ctx context.Context, s *Server) error    // one readiness probe
}

// start starts l's server on fresh free ports and waits until it is
// ready; if it exits first because a port was taken meanwhile, it is
// started again on other ports. t.Cleanup stops it.
func start(t testing.TB, l launch) *Server {
	t.Helper()
	var err error
	for try := 1; try <= startTries; try++ {
		var s *Server
		s, err = startOnce(l, try)
		if err == nil {
			t.Cleanup(func() {
				if err := s.Stop(); err != nil {
					t.Errorf("%v", err)
				}
			})
			return s
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	t.Fatalf("%v", err)
	return nil
}

func startOnce(l launch, try int) (*Server, error) {
	ports, err := freePorts(l.ports)
	if err != nil {
		return nil, err
	}
	args, env := l.args(ports)
	grpcAddr, httpAddr := l.addrs(ports)
	logPath := filepath.Join(l.dir, fmt.Sprintf("server-%d.log", try))
	out, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("compare: %w", err)
	}
	defer out.Close()
	cmd := exec.Command(l.bin, args...)
	cmd.Dir = l.dir
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = out, out
	proc, err := spawn.Start(cmd)
	if err != nil {
		return nil, fmt.Errorf("compare: start %s: %w", l.name, err)
	}
	s := &Server{Name: l.name, GRPCAddr: grpcAddr, HTTPAddr: httpAddr, logPath: logPath, proc: proc}
	err = proc.WaitReady(readyTimeout, pollInterval, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		defer cancel()
		return l.ready(ctx, s)
	})
	if err != nil {
		s.Stop()
		return nil, fmt.Errorf("compare: %s: %w\n%s", s.Name, err, s.LogTail())
	}
	return s, nil
}

// httpOK checks that GET url answers 200.
func httpOK(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// tcpOpen checks that addr accepts a TCP connection.
func tcpOpen(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

// freePorts returns n distinct ports of 127.0.0.1 that were free a moment
// ago ([spawn.FreePort]).
func freePorts(n int) ([]int, error) {
	var ports []int
	for len(ports) < n {
		port, err := spawn.FreePort()
		if err != nil {
			return nil, fmt.Errorf("compare: free port: %w", err)
		}
		if !slices.Contains(ports, port) {
			ports = append(ports, port)
		}
	}
	return ports, nil
}

// loopback returns "127.0.0.1:port".
func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
