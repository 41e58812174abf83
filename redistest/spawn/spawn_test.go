//go:build unix

package spawn

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestFreePort(t *testing.T) {
	t.Parallel()
	low := ephemeralLow()
	for _, offsets := range [][]int{nil, {10000}} {
		// Another process may bind the port between FreePort and the
		// check (make test starts servers in several processes at once):
		// a port taken once is not a fault, the same fault thrice is.
		var taken []string
		for len(taken) < 3 {
			p, err := FreePort(offsets...)
			if err != nil {
				t.Fatalf("FreePort(%v): %v", offsets, err)
			}
			if p < minPort {
				t.Errorf("FreePort(%v) = %d, below %d", offsets, p, minPort)
			}
			if low > minPort+1000+10000 && p >= low {
				t.Errorf("FreePort(%v) = %d, in the ephemeral range from %d", offsets, p, low)
			}
			if err := listenAll(p, offsets); err != nil {
				taken = append(taken, err.Error())
				continue
			}
			break
		}
		if len(taken) == 3 {
			t.Errorf("FreePort(%v) returned a port in use three times: %v", offsets, taken)
		} else if len(taken) > 0 {
			t.Logf("FreePort(%v): taken by another process before the check: %v", offsets, taken)
		}
	}
}

// listenAll listens on 127.0.0.1 at port and at port+off for each of
// offsets, and closes the listeners.
func listenAll(port int, offsets []int) error {
	for _, off := range append([]int{0}, offsets...) {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+off))
		if err != nil {
			return fmt.Errorf("port %d: %w", port+off, err)
		}
		l.Close()
	}
	return nil
}

func TestProcess(t *testing.T) {
	t.Parallel()
	p, err := Start(exec.Command("sleep", "60"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Exited() || p.State() != nil {
		t.Fatalf("a running process: Exited() = %v, State() = %v", p.Exited(), p.State())
	}
	if p.WaitFor(10 * time.Millisecond) {
		t.Fatal("WaitFor(10ms) = true on sleep 60")
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("Signal(SIGTERM): %v", err)
	}
	if !p.WaitFor(time.Minute) {
		t.Fatal("WaitFor(1m) = false after SIGTERM")
	}
	if !p.Exited() || p.State() == nil {
		t.Fatalf("an exited process: Exited() = %v, State() = %v", p.Exited(), p.State())
	}
	if err := p.Kill(); err != nil {
		t.Errorf("Kill of an exited process: %v", err)
	}
}

func TestWaitReady(t *testing.T) {
	t.Parallel()
	errNo := errors.New("not yet")
	sleep, err := Start(exec.Command("sleep", "60"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleep.Kill() })
	calls := 0
	ready := func() error {
		if calls++; calls < 3 {
			return errNo
		}
		return nil
	}
	if err := sleep.WaitReady(time.Minute, time.Millisecond, ready); err != nil || calls != 3 {
		t.Errorf("WaitReady(ready on the third probe) = %v after %d probes, want nil after 3", err, calls)
	}
	never := func() error { return errNo }
	if err := sleep.WaitReady(0, time.Millisecond, never); !errors.Is(err, errNo) || errors.Is(err, ErrExited) {
		t.Errorf("WaitReady(0, never ready) = %v, want the probe's error", err)
	}
	exit, err := Start(exec.Command("sh", "-c", "exit 3"))
	if err != nil {
		t.Fatal(err)
	}
	if err := exit.WaitReady(time.Minute, time.Millisecond, never); !errors.Is(err, ErrExited) {
		t.Errorf("WaitReady on a process that exits = %v, want ErrExited", err)
	}
}

func TestTail(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "log")
	long := strings.Repeat("x", maxTail) + "end"
	if err := os.WriteFile(path, []byte("start\n"+long), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		from int64
		want string
	}{
		{0, long[len(long)-maxTail:]},
		{int64(len("start\n" + long)), ""},
		{int64(len("start\n"+long)) + 1, ""},
	} {
		if got := Tail(path, c.from); got != c.want {
			t.Errorf("Tail(log, %d) = %d bytes ending %q, want %d bytes", c.from, len(got), got[max(0, len(got)-3):], len(c.want))
		}
	}
	if got := Tail(filepath.Join(t.TempDir(), "none"), 0); got != "" {
		t.Errorf("Tail(a missing file) = %q, want \"\"", got)
	}
}

func TestCopy(t *testing.T) {
	t.Parallel()
	tmpl := filepath.Join(t.TempDir(), "tmpl")
	if err := os.MkdirAll(filepath.Join(tmpl, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmpl, "sub", "f"), []byte("kept"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir, err := Copy("spawntest-", tmpl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if b, err := os.ReadFile(filepath.Join(dir, "data", "sub", "f")); err != nil || string(b) != "kept" {
		t.Errorf("Copy: data/sub/f = %q, %v; want \"kept\"", b, err)
	}
	if dir, err := Copy("spawntest-", filepath.Join(tmpl, "none")); err == nil {
		os.RemoveAll(dir)
		t.Errorf("Copy of a missing template = %s, nil; want an error", dir)
	}
}
