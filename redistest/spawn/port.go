package spawn

import (
	"errors"
	"math/rand/v2"
	"net"
	"strconv"
)

const (
	// minPort is the lowest port FreePort returns: above the standard
	// ports of common servers (Redis's, PostgreSQL's, MySQL's), so that a
	// test never starts on, or connects to, the machine's own.
	minPort = 10000
	// maxPort is the highest port there is.
	maxPort = 65535
	// assumedLow is the first ephemeral port where the kernel does not
	// say: Linux's default, below that of macOS and Windows (49152).
	assumedLow = 32768
)

// FreePort returns a port p of 127.0.0.1 that was free a moment ago, with
// p+off free too for each of offsets (a Redis Cluster node's bus listens
// on its port + 10000). It is never below 10000.
//
// It picks p, and p+off, below the kernel's range of ephemeral ports where
// it can: the kernel gives a client's connection a local port from that
// range, and one given a killed server's port would hold it, on any
// process's connection (another test's pool), until it closes, so that a
// restart could not bind it again. Only if it finds none there does it
// take one the kernel hands out.
//
// Another process may take the port before the caller binds it; a caller
// starts its server on a fresh port when the server says so.
func FreePort(offsets ...int) (int, error) {
	top := 0
	for _, off := range offsets {
		top = max(top, off)
	}
	low := ephemeralLow()
	if low == 0 {
		low = assumedLow
	}
	if n := low - top - minPort; n > 1000 {
		for range 100 {
			if p := minPort + rand.IntN(n); free(p, offsets) {
				return p, nil
			}
		}
	}
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if p >= minPort && p+top <= maxPort && free(p, offsets) {
			return p, nil
		}
	}
	return 0, errors.New("found no free port")
}

// free reports whether port, and port+off for each of offsets, can be
// listened on at 127.0.0.1.
func free(port int, offsets []int) bool {
	for _, off := range append([]int{0}, offsets...) {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+off)))
		if err != nil {
			return false
		}
		defer l.Close()
	}
	return true
}
