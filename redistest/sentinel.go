package redistest

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The sentinels' settings, and the limits of the waits for them. A
// primary that does not answer for a second is down; a failover that has
// not promoted the replica within 3 seconds is given up and tried again
// after twice that.
const (
	sentinelCount      = 3
	sentinelQuorum     = 2
	sentinelDownAfter  = time.Second
	sentinelFailover   = 3 * time.Second
	sentinelReadyLimit = 15 * time.Second       // from the sentinels' start to their agreement
	sentinelPoll       = 50 * time.Millisecond  // between checks of a wait
	sentinelAttempts   = 2                      // whole sets tried by StartSentinel
	sentinelRetryPause = 100 * time.Millisecond // before the second try
)

// sentinelMaster is the name under which the sentinels monitor the
// primary: [Sentinel.MasterName].
const sentinelMaster = "redistest"

// Sentinel is a Redis Sentinel set of the test's own: a primary, its
// replica and three sentinels monitoring them under one name, each a
// [Server] of its own on 127.0.0.1. The sentinels consider the primary
// down after a second without an answer; two of them agreeing starts a
// failover, which promotes the replica, usually within 2 to 4 seconds of
// the primary's death. Its methods are safe for concurrent use.
type Sentinel struct {
	sentinels []*Server

	mu      sync.Mutex // guards the roles, which a failover swaps
	primary *Server
	replica *Server
}

// StartSentinel starts a Sentinel set of the test's own: a primary, a
// replica of it (replicaof), and three sentinels (redis-server
// --sentinel) monitoring the primary with a quorum of 2, each on a free
// port. It returns once the replica is in sync and every sentinel knows
// the primary, the replica and the two other sentinels, so that a
// failover can start: usually within a second, as the sentinels announce
// themselves every 500 ms here (2 s by default). A sentinel whose timer
// ran late (a stall of the machine) pauses for a second, not the default
// 30. Options apply to the primary and the replica; StartSentinel
// rejects [WithTLS], since the sentinels talk to them in plain text.
// t.Cleanup stops every process by PID and removes their directories.
// StartSentinel fails the test if the set does not come up; a first
// failure is logged and the whole set started afresh once. It needs
// Redis 7.0 or later (SENTINEL DEBUG).
func StartSentinel(t testing.TB, opts ...Option) *Sentinel {
	t.Helper()
	s, err := startSentinel(opts, t.Logf)
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

func startSentinel(opts []Option, logf func(format string, args ...any)) (*Sentinel, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if cfg.tls != nil {
		return nil, errors.New("redistest: StartSentinel does not take WithTLS: its sentinels talk to the servers in plain text")
	}
	for attempt := 1; ; attempt++ {
		s, err := trySentinel(opts)
		if err == nil || attempt == sentinelAttempts {
			return s, err
		}
		logf("redistest: starting a Sentinel set failed, trying once more: %v", err)
		time.Sleep(sentinelRetryPause)
	}
}

func trySentinel(opts []Option) (*Sentinel, error) {
	// Without a delay before a diskless sync (5 seconds by default), the
	// replica is in sync within milliseconds, and so is a restarted one.
	opts = append([]Option{WithArgs("--repl-diskless-sync-delay", "0")}, opts...)
	s := &Sentinel{}
	var err error
	if s.primary, err = startServer(opts, false, false); err != nil {
		return nil, err
	}
	replicaOpts := append(opts, WithArgs("--replicaof", "127.0.0.1", strconv.Itoa(s.primary.Port())))
	if s.replica, err = startServer(replicaOpts, false, false); err != nil {
		return nil, errors.Join(err, s.close())
	}
	if err := waitFor(sentinelReadyLimit, s.replicaSynced); err != nil {
		return nil, errors.Join(err, s.close())
	}
	conf := sentinelConfig(s.primary.Port())
	for range sentinelCount {
		sn, err := startServer([]Option{optionFunc(func(c *config) { c.sentinel = conf })}, false, false)
		if err != nil {
			return nil, errors.Join(err, s.close())
		}
		s.sentinels = append(s.sentinels, sn)
		if _, err := sn.Do(append([]string{"SENTINEL", "DEBUG"}, sentinelTimings...)...); err != nil {
			return nil, errors.Join(fmt.Errorf("redistest: sentinel %s: SENTINEL DEBUG (Redis 7.0 or later): %w", sn.Addr(), err), s.close())
		}
	}
	if err := waitFor(sentinelReadyLimit, s.ready); err != nil {
		return nil, errors.Join(err, s.close())
	}
	return s, nil
}

// sentinelTimings are the sentinels' internal periods, in ms, set with
// SENTINEL DEBUG at their start (a restarted sentinel has the defaults
// again). A sentinel whose own timer runs late by more than 2 seconds, as
// on a loaded test machine, stops acting for tilt-period (30 s by
// default) lest it judge the servers by a stale clock: here 1 s, so that
// a stall delays a failover rather than stopping it. Sentinels announce
// themselves every publish-period (2 s by default) and, once the primary
// is down, ask one another about it every ask-period (1 s): here 500 ms,
// so that they find one another, and agree the primary is down, sooner.
var sentinelTimings = []string{"tilt-period", "1000", "publish-period", "500", "ask-period", "500"}

// sentinelConfig returns a sentinel's configuration file, monitoring the
// primary on port.
func sentinelConfig(port int) string {
	ms := func(d time.Duration) string { return strconv.Itoa(int(d / time.Millisecond)) }
	return strings.Join([]string{
		fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d", sentinelMaster, port, sentinelQuorum),
		fmt.Sprintf("sentinel down-after-milliseconds %s %s", sentinelMaster, ms(sentinelDownAfter)),
		fmt.Sprintf("sentinel failover-timeout %s %s", sentinelMaster, ms(sentinelFailover)),
		"",
	}, "\n")
}

// waitFor calls check every sentinelPoll until it returns nil, for up to
// limit, and then returns what it last returned.
func waitFor(limit time.Duration, check func() error) error {
	deadline := time.Now().Add(limit)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: not ready after %v: %w", limit, err)
		}
		time.Sleep(sentinelPoll)
	}
}

// replicaSynced checks once that the replica's link to the primary is up.
func (s *Sentinel) replicaSynced() error {
	info, err := infoOf(s.replica, "replication")
	if err != nil {
		return err
	}
	if got := infoField(info, "master_link_status"); got != "up" {
		return fmt.Errorf("replica %s: master_link_status:%s, want up", s.replica.Addr(), got)
	}
	return nil
}

// ready checks once that every sentinel sees the primary up, with the
// replica and the two other sentinels.
func (s *Sentinel) ready() error {
	for _, sn := range s.sentinels {
		r, err := sn.Do("SENTINEL", "MASTER", sentinelMaster)
		if err != nil {
			return fmt.Errorf("sentinel %s: %w", sn.Addr(), err)
		}
		m, err := fieldMap(r)
		if err != nil {
			return fmt.Errorf("sentinel %s: SENTINEL MASTER: %w", sn.Addr(), err)
		}
		for _, f := range []struct{ name, want string }{
			{"flags", "master"},
			{"port", strconv.Itoa(s.primary.Port())},
			{"num-slaves", "1"},
			{"num-other-sentinels", strconv.Itoa(sentinelCount - 1)},
		} {
			if m[f.name] != f.want {
				return fmt.Errorf("sentinel %s: %s is %q, want %q", sn.Addr(), f.name, m[f.name], f.want)
			}
		}
		r, err = sn.Do("SENTINEL", "REPLICAS", sentinelMaster)
		if err != nil {
			return fmt.Errorf("sentinel %s: %w", sn.Addr(), err)
		}
		replicas, err := r.Array()
		if err != nil || len(replicas) != 1 {
			return fmt.Errorf("sentinel %s: SENTINEL REPLICAS replied %v, want the one replica", sn.Addr(), r)
		}
		rm, err := fieldMap(replicas[0])
		if err != nil {
			return fmt.Errorf("sentinel %s: SENTINEL REPLICAS: %w", sn.Addr(), err)
		}
		if rm["port"] != strconv.Itoa(s.replica.Port()) || rm["flags"] != "slave" || rm["master-link-status"] != "ok" {
			return fmt.Errorf("sentinel %s sees the replica as port %s, flags %q, master-link-status %q", sn.Addr(), rm["port"], rm["flags"], rm["master-link-status"])
		}
	}
	return nil
}

// fieldMap reads a reply that is an array of alternating field names and
// values, as SENTINEL MASTER's.
func fieldMap(r Reply) (map[string]string, error) {
	fields, err := r.Strings()
	if err != nil {
		return nil, err
	}
	if len(fields)%2 != 0 {
		return nil, fmt.Errorf("%d elements, want pairs", len(fields))
	}
	m := make(map[string]string, len(fields)/2)
	for i := 0; i < len(fields); i += 2 {
		m[fields[i]] = fields[i+1]
	}
	return m, nil
}

// infoOf returns a section of s's INFO.
func infoOf(s *Server, section string) (string, error) {
	r, err := s.Do("INFO", section)
	if err != nil {
		return "", err
	}
	return r.String()
}

// MasterName returns the name under which the sentinels monitor the
// primary, which clients give with the sentinels' addresses (go-redis's
// FailoverOptions.MasterName, rueidis's SentinelOption.MasterSet).
func (s *Sentinel) MasterName() string { return sentinelMaster }

// SentinelAddrs returns the sentinels' addresses, "127.0.0.1:PORT".
func (s *Sentinel) SentinelAddrs() []string {
	addrs := make([]string, len(s.sentinels))
	for i, sn := range s.sentinels {
		addrs[i] = sn.Addr()
	}
	return addrs
}

// Sentinels returns the sentinels, in the order of [Sentinel.SentinelAddrs].
// The slice is the caller's; the servers are shared with the set.
func (s *Sentinel) Sentinels() []*Server {
	return slices.Clone(s.sentinels)
}

// Primary returns the primary: the server started as the primary, or,
// after [Sentinel.WaitFailover], the replica it promoted.
func (s *Sentinel) Primary() *Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.primary
}

// Replica returns the server that is not [Sentinel.Primary]: the one
// started as the replica, or, after [Sentinel.WaitFailover], the former
// primary, which the sentinels make a replica of the new one if it is
// restarted.
func (s *Sentinel) Replica() *Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.replica
}

// KillPrimary sends SIGKILL to [Sentinel.Primary] and waits until it is
// reaped. The writes the replica has not received yet are lost, as in a
// crash: Redis replicates asynchronously.
func (s *Sentinel) KillPrimary() error {
	return s.Primary().Kill()
}

// MasterAddr returns the primary's address as the sentinels report it
// now (SENTINEL GET-MASTER-ADDR-BY-NAME), "127.0.0.1:PORT": the first
// sentinel's answer that it gets, as a client asks them in turn.
func (s *Sentinel) MasterAddr() (string, error) {
	var errs []error
	for _, sn := range s.sentinels {
		addr, err := masterAddr(sn)
		if err == nil {
			return addr, nil
		}
		errs = append(errs, err)
	}
	return "", fmt.Errorf("redistest: no sentinel reports the primary: %w", errors.Join(errs...))
}

// masterAddr asks sentinel sn for the primary's address.
func masterAddr(sn *Server) (string, error) {
	r, err := sn.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", sentinelMaster)
	if err != nil {
		return "", fmt.Errorf("sentinel %s: %w", sn.Addr(), err)
	}
	hp, err := r.Strings()
	if err != nil || len(hp) != 2 {
		return "", fmt.Errorf("sentinel %s: GET-MASTER-ADDR-BY-NAME replied %v", sn.Addr(), r)
	}
	return net.JoinHostPort(hp[0], hp[1]), nil
}

// WaitFailover waits, for up to timeout, until every sentinel reports
// [Sentinel.Replica] as the primary and that server answers ROLE as a
// master; it then swaps the roles ([Sentinel.Primary] is the promoted
// server) and returns the new primary. It polls every 50 ms. On timeout it
// returns an error saying what each sentinel last reported, with the end
// of each sentinel's log.
//
// A failover starts once the sentinels have found the primary down
// (a second without an answer) and elected a leader; an election that
// splits the votes is tried again 6 seconds later. Allow 15 seconds on a
// loaded machine.
func (s *Sentinel) WaitFailover(timeout time.Duration) (*Server, error) {
	// The roles are read and swapped under the lock, not held during the
	// wait: Primary and Replica answer meanwhile.
	s.mu.Lock()
	from, to := s.primary, s.replica
	s.mu.Unlock()
	err := waitFor(timeout, func() error {
		for _, sn := range s.sentinels {
			addr, err := masterAddr(sn)
			if err != nil {
				return err
			}
			if addr != to.Addr() {
				return fmt.Errorf("sentinel %s reports the primary at %s, want %s", sn.Addr(), addr, to.Addr())
			}
		}
		return isMaster(to)
	})
	if err != nil {
		var logs strings.Builder
		for _, sn := range s.sentinels {
			logs.WriteString(sn.logTail())
		}
		return nil, fmt.Errorf("redistest: no failover from %s to %s: %w\n%s", from.Addr(), to.Addr(), err, logs.String())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.primary != from {
		return nil, errors.New("redistest: WaitFailover called twice at once")
	}
	s.primary, s.replica = to, from
	return to, nil
}

// isMaster checks that s answers ROLE as a master. A sentinel's
// reconfiguration of s (CLIENT KILL TYPE normal) closes the connections
// Do keeps, so a broken connection is tried once more, on a new one.
func isMaster(s *Server) error {
	r, err := s.Do("ROLE")
	if _, redisErr := errors.AsType[*RedisError](err); err != nil && !redisErr && !errors.Is(err, ErrStopped) {
		r, err = s.Do("ROLE")
	}
	if err != nil {
		return err
	}
	role, err := r.Array()
	if err != nil || len(role) == 0 {
		return fmt.Errorf("%s: ROLE replied %v", s.Addr(), r)
	}
	if str, _ := role[0].String(); str != "master" {
		return fmt.Errorf("%s is a %s, not yet a master", s.Addr(), str)
	}
	return nil
}

// close is the final stop of every server, the sentinels first, so that
// none of them starts a failover while the others stop.
func (s *Sentinel) close() error {
	var errs []error
	for _, sn := range s.sentinels {
		errs = append(errs, sn.close())
	}
	for _, srv := range []*Server{s.replica, s.primary} {
		if srv != nil {
			errs = append(errs, srv.close())
		}
	}
	return errors.Join(errs...)
}
