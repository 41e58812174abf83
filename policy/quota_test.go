//go:build linux && !race

package policy

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/redistest"
)

// TestCPUQuota runs the busy-host load through the docs' chain on a
// healthy Redis with this process under a real CFS CPU quota, as a
// container's CPU limit puts it: a cgroup of its own whose quota is
// three quarters of what the process used a second just before, per
// 100 ms period, so that it is throttled until the next period in nearly
// every one (a quota of all it used throttled only its bursts: 2 periods
// of 30 on an idle machine, whose load runs evenly). The
// process's threads then all stop together, which the breaker must not
// blame on Redis: at most 0.10 % of the decisions by the mode, and no
// change of state. The test fails if the quota throttled the process in
// fewer than a tenth of the periods: it would have tested nothing.
//
// It needs the cgroup CPU controller and the right to make a cgroup
// (root, as CI runs), and skips, saying so, where it has neither.
func TestCPUQuota(t *testing.T) {
	exclusive(t)
	probe, err := newCPUQuota("probe")
	if err != nil {
		t.Skipf("no cgroup CPU quota to test under: %v", err)
	}
	if err := probe.remove(); err != nil {
		t.Fatal(err)
	}
	for _, cl := range clients {
		t.Run(cl.name, func(t *testing.T) {
			srv := redistest.Start(t)
			var changes atomic.Int64
			remote := cl.store(t, srv.Addr(), nil)
			chain, b := docsChain(t, remote, func(Change) { changes.Add(1) })
			var cur atomic.Pointer[tally]
			cur.Store(&tally{})
			stop := make(chan struct{})
			wg := openLoop(chain, b, &cur, stop)
			defer func() { close(stop); wg.Wait() }()

			// A second for the cold start, then one to learn what the load
			// costs. The cold start is TestBusyHost's to judge: this test
			// begins its phase with the circuit closed.
			time.Sleep(time.Second)
			if b.State() != Closed {
				t.Logf("the circuit is %v after the cold start (%+v); waiting for it to close", b.State(), b.Stats())
				waitState(b, Closed, DefaultOpenTimeout+5*time.Second)
			}
			cpu0, at0 := processCPU(), time.Now()
			time.Sleep(time.Second)
			used := time.Duration(processCPU() - cpu0)
			perPeriod := used * quotaPeriod / time.Since(at0) * 3 / 4

			q, err := newCPUQuota(strings.ReplaceAll(t.Name(), "/", "-"))
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := q.remove(); err != nil {
					t.Error(err)
				}
			}()
			if err := q.limit(perPeriod); err != nil {
				t.Fatal(err)
			}
			before := changes.Load()
			r := &tally{}
			cur.Store(r)
			if err := q.enter(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(quotaPhase)
			if err := q.leave(); err != nil {
				t.Fatal(err)
			}
			cur.Store(&tally{})
			periods, throttled, waited, err := q.stat()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("quota %v a %v period (the load used %v a second before): throttled in %d of %d periods, %v in all; %v; deadline %v; circuit changes %d; %+v",
				perPeriod, quotaPeriod, used.Round(time.Millisecond), throttled, periods, waited, r, b.timeoutNow(), changes.Load()-before, b.Stats())
			if throttled*10 < periods {
				t.Errorf("the quota throttled the process in %d of %d periods: the phase tested nothing", throttled, periods)
			}
			if share := float64(r.byMode.Load()) / float64(max(r.decisions.Load(), 1)); share > busyMaxShare {
				t.Errorf("%v: more than %.2f%% by the mode on a healthy Redis", r, 100*busyMaxShare)
			}
			if e := r.firstErr.Load(); e != nil {
				t.Errorf("%d errors, the first: %v", r.errors.Load(), *e)
			}
			if n := changes.Load() - before; n != 0 {
				t.Errorf("the circuit changed state %d times on a healthy Redis", n)
			}
		})
	}
}

// quotaPhase is how long the load runs under the quota: as long as a
// busy-host phase, since a throttled period now and then times out one
// round of the 64 callers together (the thread that reads the replies
// waits for a core after the period, which the deadline counts), 0.08 %
// of a 3 s phase's decisions.
const quotaPhase = 6 * time.Second

// quotaPeriod is the CFS period of TestCPUQuota's cgroup, the kernel's
// and the container runtimes' default.
const quotaPeriod = 100 * time.Millisecond

// cpuQuota is a cgroup of the CPU controller (version 1 or 2) made for
// this process: it can limit the CPU time the process gets a period, move
// the process in and back out, and read how often it was throttled.
type cpuQuota struct {
	dir    string // the cgroup's directory
	home   string // the directory of the cgroup the process came from
	v2     bool
	period time.Duration
}

// newCPUQuota makes a cgroup named after name and the process's PID
// beside the process's own cgroup of the CPU controller, with no limit
// yet.
func newCPUQuota(name string) (*cpuQuota, error) {
	q := &cpuQuota{period: quotaPeriod}
	mount, path, v2, err := cpuCgroup()
	if err != nil {
		return nil, err
	}
	q.v2, q.home = v2, filepath.Join(mount, path)
	q.dir = filepath.Join(q.home, fmt.Sprintf("sluice-%s-%d", name, os.Getpid()))
	if err := os.Mkdir(q.dir, 0o755); err != nil {
		return nil, err
	}
	return q, nil
}

// cpuCgroup finds the CPU controller's mount and the process's cgroup
// under it: version 1's cpu hierarchy, or version 2's unified one if it
// offers the controller.
func cpuCgroup() (mount, path string, v2 bool, err error) {
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", "", false, err
	}
	for line := range strings.Lines(string(own)) {
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(f) != 3 {
			continue
		}
		for c := range strings.SplitSeq(f[1], ",") {
			if c == "cpu" {
				mount, err = mountOf("cgroup", "cpu")
				return mount, f[2], false, err
			}
		}
		if f[0] == "0" && f[1] == "" {
			path = f[2]
		}
	}
	mount, err = mountOf("cgroup2", "")
	if err != nil {
		return "", "", false, err
	}
	ctl, err := os.ReadFile(filepath.Join(mount, path, "cgroup.controllers"))
	if err != nil || !strings.Contains(" "+strings.TrimSpace(string(ctl))+" ", " cpu ") {
		return "", "", false, errors.New("the unified cgroup hierarchy offers no cpu controller here")
	}
	return mount, path, true, nil
}

// mountOf returns where a file system of type fstype is mounted, with
// option opt among its super options if opt is not empty.
func mountOf(fstype, opt string) (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		pre, post, ok := strings.Cut(s.Text(), " - ")
		fields, after := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(after) < 3 || after[0] != fstype {
			continue
		}
		if opt == "" || strings.Contains(","+after[2]+",", ","+opt+",") {
			return fields[4], nil
		}
	}
	return "", fmt.Errorf("no %s file system mounted", fstype)
}

// limit lets the cgroup's processes run for at most quota of CPU time
// each period.
func (q *cpuQuota) limit(quota time.Duration) error {
	us := max(quota.Microseconds(), 1000) // the kernel's least quota is 1 ms
	if q.v2 {
		return q.write("cpu.max", fmt.Sprintf("%d %d", us, q.period.Microseconds()))
	}
	if err := q.write("cpu.cfs_period_us", strconv.FormatInt(q.period.Microseconds(), 10)); err != nil {
		return err
	}
	return q.write("cpu.cfs_quota_us", strconv.FormatInt(us, 10))
}

// enter moves the process, every thread of it, into the cgroup; leave
// moves it back to the cgroup it came from.
func (q *cpuQuota) enter() error { return q.move(q.dir) }
func (q *cpuQuota) leave() error { return q.move(q.home) }

func (q *cpuQuota) move(dir string) error {
	return os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0)
}

func (q *cpuQuota) write(file, value string) error {
	return os.WriteFile(filepath.Join(q.dir, file), []byte(value), 0)
}

// stat returns the periods in which the cgroup's processes ran, those in
// which they were throttled, and how long they were throttled in all.
func (q *cpuQuota) stat() (periods, throttled int64, waited time.Duration, err error) {
	b, err := os.ReadFile(filepath.Join(q.dir, "cpu.stat"))
	if err != nil {
		return 0, 0, 0, err
	}
	for line := range strings.Lines(string(b)) {
		name, value, _ := strings.Cut(strings.TrimSpace(line), " ")
		n, _ := strconv.ParseInt(value, 10, 64)
		switch name {
		case "nr_periods":
			periods = n
		case "nr_throttled":
			throttled = n
		case "throttled_time": // version 1, ns
			waited = time.Duration(n)
		case "throttled_usec": // version 2
			waited = time.Duration(n) * time.Microsecond
		}
	}
	return periods, throttled, waited, nil
}

// remove moves the process back if it is still in the cgroup, and
// removes the cgroup.
func (q *cpuQuota) remove() error {
	if err := q.leave(); err != nil {
		return err
	}
	return os.Remove(q.dir)
}
