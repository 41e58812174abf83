package redistest

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
)

// mainRunning is set by Main; Shared and SharedCluster refuse to start a
// server that nothing would stop.
var mainRunning atomic.Bool

var (
	sharedServer  lazy[*Server]
	sharedCluster lazy[*Cluster]
)

// lazy is a value started on first use. Unlike sync.OnceValues it can also
// report whether it was ever started, so Main stops only what exists.
type lazy[T any] struct {
	once    sync.Once
	v       T
	err     error
	started atomic.Bool
}

// get starts the value on the first call; every call, concurrent or later,
// returns the first call's result, failure included.
func (l *lazy[T]) get(start func() (T, error)) (T, error) {
	l.once.Do(func() {
		l.err = errors.New("redistest: starting the shared server panicked")
		l.v, l.err = start()
		l.started.Store(l.err == nil)
	})
	return l.v, l.err
}

// Shared returns the test binary's shared server, starting it on first use;
// every later call, from any test, returns the same server. It is safe to
// call from parallel tests. If the first start failed, every call fails its
// test with that error.
//
// Tests that share the server must not disturb each other: each uses keys
// under a prefix of its own (t.Name() is a good one), and none calls
// FLUSHALL, FLUSHDB, CONFIG SET, SHUTDOWN or anything else that reaches
// beyond its keys. Kill, Stop and Restart return [ErrShared]; use [Start] for
// fault tests.
//
// The package's TestMain must call [Main], which stops the server once every
// test has run; Shared fails the test if Main is not running.
func Shared(t testing.TB) *Server {
	t.Helper()
	requireMain(t, "Shared")
	s, err := sharedServer.get(func() (*Server, error) {
		return startServer(nil, false, true)
	})
	if err != nil {
		t.Fatalf("redistest: shared server: %v", err)
	}
	return s
}

// SharedAddr is [Shared] for code that has no testing.TB, such as a
// runnable Example: it returns the shared server's address, starting the
// server on first use, under the same rules.
func SharedAddr() (string, error) {
	if !mainRunning.Load() {
		return "", errors.New("redistest: SharedAddr needs the package's TestMain to call redistest.Main(m)")
	}
	s, err := sharedServer.get(func() (*Server, error) {
		return startServer(nil, false, true)
	})
	if err != nil {
		return "", fmt.Errorf("redistest: shared server: %w", err)
	}
	return s.Addr(), nil
}

// SharedCluster is [Shared] for a cluster: it returns the test binary's
// shared [Cluster], starting it on first use, under the same rules. Its
// nodes' Kill, Stop and Restart return [ErrShared]; use [StartCluster] for
// fault tests.
func SharedCluster(t testing.TB) *Cluster {
	t.Helper()
	requireMain(t, "SharedCluster")
	c, err := sharedCluster.get(func() (*Cluster, error) {
		return startCluster(nil, true, t.Logf)
	})
	if err != nil {
		t.Fatalf("redistest: shared cluster: %v", err)
	}
	return c
}

// SharedClusterAddrs is [SharedCluster] for code that has no testing.TB,
// such as a runnable Example: it returns the addresses of the shared
// cluster's three masters, "127.0.0.1:PORT" in the order of
// [Cluster.Addrs], starting the cluster on first use, under the same rules.
// A first failure to start is written to standard error and the whole
// cluster started afresh once, as [SharedCluster] does.
func SharedClusterAddrs() ([]string, error) {
	if !mainRunning.Load() {
		return nil, errors.New("redistest: SharedClusterAddrs needs the package's TestMain to call redistest.Main(m)")
	}
	c, err := sharedCluster.get(func() (*Cluster, error) {
		return startCluster(nil, true, func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, format+"\n", args...)
		})
	})
	if err != nil {
		return nil, fmt.Errorf("redistest: shared cluster: %w", err)
	}
	return c.Addrs(), nil
}

func requireMain(t testing.TB, name string) {
	t.Helper()
	if !mainRunning.Load() {
		t.Fatalf("redistest: %s needs the package's TestMain to call redistest.Main(m), which stops the shared servers", name)
	}
}

// Main runs the tests of a package that uses [Shared], [SharedCluster],
// [SharedAddr] or [SharedClusterAddrs] and then stops the shared servers
// by PID and removes their directories. Call it as the whole of TestMain:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
//
// If the tests passed and the servers stopped, it then runs each of
// checks, such as a check that no goroutine outlived the tests. It exits
// with m.Run's code, or with 1 if a shared server could not be stopped or
// a check failed. It never returns.
func Main(m *testing.M, checks ...func() error) {
	mainRunning.Store(true)
	code := m.Run()
	if err := stopShared(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	for _, check := range checks {
		if code != 0 {
			break
		}
		if err := check(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

func stopShared() error {
	var errs []error
	if sharedServer.started.Load() {
		errs = append(errs, sharedServer.v.close())
	}
	if sharedCluster.started.Load() {
		errs = append(errs, sharedCluster.v.close())
	}
	return errors.Join(errs...)
}
