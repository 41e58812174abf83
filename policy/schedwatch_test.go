//go:build !race

package policy

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// schedWatch follows how long redis-server and this process wait for a
// core, so that decisions the mode answered on a healthy Redis can be
// traced to who was waiting: Redis, whose replies then come late, or
// this process, whose stalls the process clock leaves out. It samples
// every 10 ms the run delay the kernel counts for each thread (the second
// field of /proc/PID/task/TID/schedstat, ns spent runnable but not
// running); where /proc has no schedstat it records nothing.
type schedWatch struct {
	redis int // redis-server's PID
	mu    sync.Mutex
	log   []schedSample // bounded: oldest dropped past watchKeep
	stop  chan struct{}
	done  chan struct{}
}

// schedSample is one sample: the run delay so far of redis-server's
// threads and of this process's, on the wall clock at.
type schedSample struct {
	at          time.Time
	redis, self time.Duration
}

const (
	watchBeat = 10 * time.Millisecond
	watchKeep = 2000 // 20 s of samples
)

// startSchedWatch starts sampling for redis-server's PID redis until the
// returned watch is stopped (also at the test's end).
func startSchedWatch(redis int) *schedWatch {
	w := &schedWatch{redis: redis, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(watchBeat)
		defer tick.Stop()
		for {
			r, okR := runDelay(w.redis)
			s, okS := runDelay(os.Getpid())
			if okR && okS {
				w.mu.Lock()
				if len(w.log) == watchKeep {
					w.log = append(w.log[:0], w.log[watchKeep/2:]...)
				}
				w.log = append(w.log, schedSample{at: time.Now(), redis: r, self: s})
				w.mu.Unlock()
			}
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

func (w *schedWatch) close() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// runDelay returns the run delay so far of every thread of process pid.
func runDelay(pid int) (time.Duration, bool) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, false
	}
	var sum int64
	for _, e := range ents {
		b, err := os.ReadFile(dir + "/" + e.Name() + "/schedstat")
		if err != nil {
			continue // the thread ended
		}
		f := bytes.Fields(b)
		if len(f) < 2 {
			return 0, false
		}
		n, err := strconv.ParseInt(string(f[1]), 10, 64)
		if err != nil {
			return 0, false
		}
		sum += n
	}
	return time.Duration(sum), true
}

// waited returns how long redis-server and this process's threads
// (summed) waited for a core between from and to, read from the samples
// around them (or the nearest there are).
func (w *schedWatch) waited(from, to time.Time) (redis, self time.Duration, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.log) == 0 {
		return 0, 0, false
	}
	a, b := &w.log[0], &w.log[len(w.log)-1]
	for i := range w.log {
		s := &w.log[i]
		if !s.at.After(from) {
			a = s
		}
		if !s.at.Before(to) {
			b = s
			break
		}
	}
	return b.redis - a.redis, b.self - a.self, true
}

// worst returns the longest redis-server waited for a core within any
// window of span between from and to.
func (w *schedWatch) worst(from, to time.Time, span time.Duration) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var most time.Duration
	j := 0
	for i := range w.log {
		s := w.log[i]
		if s.at.Before(from) || s.at.After(to) {
			continue
		}
		for j < i && s.at.Sub(w.log[j].at) > span {
			j++
		}
		if d := s.redis - w.log[j].redis; d > most {
			most = d
		}
	}
	return most
}

// modeTimes keeps when decisions were answered by the mode, the first
// few hundred of a phase.
type modeTimes struct {
	mu sync.Mutex
	at []time.Time
}

func (m *modeTimes) add(t time.Time) {
	m.mu.Lock()
	if len(m.at) < 512 {
		m.at = append(m.at, t)
	}
	m.mu.Unlock()
}

// explain describes the bursts of decisions answered by the mode (those
// within 50 ms of one another) with what w saw in the lookback before
// each: how long Redis and this process waited for a core.
func (m *modeTimes) explain(w *schedWatch, start time.Time, lookback time.Duration) string {
	m.mu.Lock()
	at := slices.Clone(m.at)
	m.mu.Unlock()
	slices.SortFunc(at, time.Time.Compare)
	var b strings.Builder
	for i := 0; i < len(at); {
		j := i
		for j+1 < len(at) && at[j+1].Sub(at[j]) < 50*time.Millisecond {
			j++
		}
		fmt.Fprintf(&b, "\n\t%d by the mode from +%v", j-i+1, at[i].Sub(start).Round(time.Millisecond))
		if r, s, ok := w.waited(at[i].Add(-lookback), at[i]); ok {
			fmt.Fprintf(&b, "; in the %v before, redis-server waited %v for a core, this process's threads %v", lookback, r.Round(100*time.Microsecond), s.Round(100*time.Microsecond))
		}
		i = j + 1
	}
	return b.String()
}
