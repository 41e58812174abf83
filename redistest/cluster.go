package redistest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/redistest/spawn"
)

const (
	clusterMasters     = 3
	clusterBusOffset   = 10000                  // the cluster bus listens on port+10000
	clusterNodeTimeout = 5 * time.Second        // --cluster-node-timeout
	clusterOKTimeout   = 30 * time.Second       // WaitOK's limit
	clusterPoll        = 50 * time.Millisecond  // between WaitOK's checks
	createTimeout      = 30 * time.Second       // redis-cli --cluster create's limit
	reshardTimeout     = 60 * time.Second       // redis-cli --cluster reshard's limit
	clusterAttempts    = 2                      // whole clusters tried by StartCluster
	clusterRetryPause  = 100 * time.Millisecond // before the second try
)

// Cluster is a Redis Cluster of three masters without replicas, each a
// [Server] of its own, holding all 16384 slots between them. Its methods are
// safe for concurrent use.
type Cluster struct {
	servers []*Server
}

// StartCluster starts a cluster of the test's own: three cluster-enabled
// redis-servers on free ports (each with a free cluster bus port 10000
// above), joined by redis-cli --cluster create, and waits until
// [Cluster.WaitOK] succeeds: usually 2 to 3 seconds in all, as redis-cli
// checks only once a second whether the nodes have joined. Options apply
// to every node. t.Cleanup stops every node by PID and removes their
// directories. StartCluster fails the test if redis-server or redis-cli is
// not installed or the cluster does not come up; a first failure is logged
// and the whole cluster started afresh once.
func StartCluster(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	c, err := startCluster(opts, false, t.Logf)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		if err := c.close(); err != nil {
			t.Errorf("%v", err)
		}
	})
	return c
}

func startCluster(opts []Option, shared bool, logf func(format string, args ...any)) (*Cluster, error) {
	cli, err := lookPath("redis-cli")
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		c, err := tryCluster(cli, opts, shared)
		if err == nil || attempt == clusterAttempts {
			return c, err
		}
		logf("redistest: starting a cluster failed, trying once more: %v", err)
		time.Sleep(clusterRetryPause)
	}
}

func tryCluster(cli string, opts []Option, shared bool) (*Cluster, error) {
	c := &Cluster{}
	for range clusterMasters {
		s, err := startServer(opts, true, shared)
		if err != nil {
			return nil, errors.Join(err, c.close())
		}
		s.cluster = c
		c.servers = append(c.servers, s)
	}
	if err := c.create(cli); err != nil {
		return nil, errors.Join(err, c.close())
	}
	if err := c.WaitOK(); err != nil {
		return nil, errors.Join(err, c.close())
	}
	return c, nil
}

// create runs redis-cli --cluster create, which assigns the slots, gives each
// node its config epoch, introduces the nodes and waits until they agree.
func (c *Cluster) create(cli string) error {
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	_, err := runCLI(cli, createTimeout, append(args, "--cluster-replicas", "0", "--cluster-yes")...)
	return err
}

// runCLI runs redis-cli with args (the first two its mode, such as
// "--cluster create") for at most timeout, and returns its output.
func runCLI(cli string, timeout time.Duration, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, cli, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := spawn.Run(cmd); err != nil {
		return nil, fmt.Errorf("redistest: redis-cli %s %s: %w\n%s", args[0], args[1], err, out.String())
	}
	return out.Bytes(), nil
}

// Addrs returns the nodes' addresses, "127.0.0.1:PORT", in the order of
// [Cluster.Servers].
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.servers))
	for i, s := range c.servers {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Servers returns the cluster's nodes, all masters. The slice is the
// caller's; the servers are shared with the cluster.
func (c *Cluster) Servers() []*Server {
	return slices.Clone(c.servers)
}

// WaitOK waits until every node reports cluster_state:ok, all 16384 slots
// assigned and ok and every node known, and every node returns the same slot
// map, in which every slot is owned by one of the cluster's nodes. It polls
// for up to 30 seconds and then returns an error describing what was last
// seen. It fails at once if a node is stopped.
//
// A restarted master waits 2 seconds before it reports ok, so WaitOK after
// [Server.Restart] of a node takes about 2 seconds. A master that was down
// for longer than the node timeout (5 seconds) has been marked failed, and
// the others clear that mark only some 10 seconds after setting it, so after
// such an outage WaitOK takes about 11 seconds (measured with 7 seconds down).
func (c *Cluster) WaitOK() error {
	deadline := time.Now().Add(clusterOKTimeout)
	for {
		err := c.checkOK()
		if err == nil || errors.Is(err, ErrStopped) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: cluster %v not ok after %v: %w", c.Addrs(), clusterOKTimeout, err)
		}
		time.Sleep(clusterPoll)
	}
}

// checkOK checks once what WaitOK waits for.
func (c *Cluster) checkOK() error {
	var first []slotRange
	for i, s := range c.servers {
		r, err := s.Do("CLUSTER", "INFO")
		if err != nil {
			return fmt.Errorf("node %s: %w", s.Addr(), err)
		}
		info, err := r.String()
		if err != nil {
			return fmt.Errorf("node %s: CLUSTER INFO: %w", s.Addr(), err)
		}
		for _, f := range []struct{ name, want string }{
			{"cluster_state", "ok"},
			{"cluster_slots_assigned", strconv.Itoa(NumSlots)},
			{"cluster_slots_ok", strconv.Itoa(NumSlots)},
			{"cluster_known_nodes", strconv.Itoa(len(c.servers))},
		} {
			if got := infoField(info, f.name); got != f.want {
				return fmt.Errorf("node %s: %s:%s, want %s", s.Addr(), f.name, got, f.want)
			}
		}
		slots, err := c.slotMap(s)
		if err != nil {
			return err
		}
		if i == 0 {
			first = slots
		} else if !slices.Equal(slots, first) {
			return fmt.Errorf("node %s sees slots %v, node %s sees %v", s.Addr(), slots, c.servers[0].Addr(), first)
		}
	}
	return nil
}

// slotRange is one entry of CLUSTER SLOTS: slots first to last, inclusive,
// served by the master on port.
type slotRange struct {
	first, last, port int
}

func (r slotRange) String() string {
	return fmt.Sprintf("%d-%d@%d", r.first, r.last, r.port)
}

// slotMap returns s's view of the slot map, sorted, checking that it covers
// every slot once and names only this cluster's nodes.
func (c *Cluster) slotMap(s *Server) ([]slotRange, error) {
	r, err := s.Do("CLUSTER", "SLOTS")
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", s.Addr(), err)
	}
	slots, err := parseSlots(r)
	if err != nil {
		return nil, fmt.Errorf("node %s: CLUSTER SLOTS %v: %w", s.Addr(), r, err)
	}
	next := 0
	for _, sr := range slots {
		if sr.first != next {
			return nil, fmt.Errorf("node %s: slot map %v does not cover slot %d once", s.Addr(), slots, next)
		}
		if c.node(sr.port) == nil {
			return nil, fmt.Errorf("node %s: slot map %v names port %d, not a node of %v", s.Addr(), slots, sr.port, c.Addrs())
		}
		next = sr.last + 1
	}
	if next != NumSlots {
		return nil, fmt.Errorf("node %s: slot map %v does not cover slot %d", s.Addr(), slots, next)
	}
	return slots, nil
}

// parseSlots reads a CLUSTER SLOTS reply: an array of [first, last,
// [ip, port, id, ...], replicas...].
func parseSlots(r Reply) ([]slotRange, error) {
	entries, err := r.Array()
	if err != nil {
		return nil, err
	}
	slots := make([]slotRange, 0, len(entries))
	for _, e := range entries {
		fields, err := e.Array()
		if err != nil {
			return nil, err
		}
		if len(fields) < 3 {
			return nil, fmt.Errorf("entry %v has %d fields, want at least 3", e, len(fields))
		}
		first, err1 := fields[0].Int()
		last, err2 := fields[1].Int()
		master, err3 := fields[2].Array()
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("entry %v: %w", e, err)
		}
		if len(master) < 2 {
			return nil, fmt.Errorf("entry %v: master has %d fields, want at least 2", e, len(master))
		}
		port, err := master[1].Int()
		if err != nil {
			return nil, fmt.Errorf("entry %v: %w", e, err)
		}
		if first < 0 || last < first || last >= NumSlots {
			return nil, fmt.Errorf("entry %v: bad slot range", e)
		}
		slots = append(slots, slotRange{int(first), int(last), int(port)})
	}
	slices.SortFunc(slots, func(a, b slotRange) int { return a.first - b.first })
	return slots, nil
}

// node returns the cluster's node on port, or nil.
func (c *Cluster) node(port int) *Server {
	for _, s := range c.servers {
		if s.port == port {
			return s
		}
	}
	return nil
}

// Owner returns the node that serves key's slot ([Slot]), as the first
// running node's CLUSTER SLOTS reports it. Send a key's commands to its
// owner: [Server.Do] does not follow MOVED redirections.
func (c *Cluster) Owner(key string) (*Server, error) {
	slot := Slot(key)
	var errs []error
	for _, s := range c.servers {
		slots, err := c.slotMap(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, sr := range slots {
			if sr.first <= slot && slot <= sr.last {
				return c.node(sr.port), nil
			}
		}
	}
	return nil, fmt.Errorf("redistest: no node of %v knows the owner of slot %d: %w", c.Addrs(), slot, errors.Join(errs...))
}

// Reshard moves the first n slots that from serves, in ascending order,
// to to, with redis-cli --cluster reshard, as an operator moves them: for
// each slot the target IMPORTING and the source MIGRATING, its keys
// MIGRATEd pipeline at a time, then every master told the slot's new
// owner. While a slot's keys are split between the two, a command on a
// key already moved gets ASK, and one on several keys of the slot split
// between them TRYAGAIN. Reshard returns once redis-cli has finished and
// [Cluster.WaitOK] has seen every node agree, or with an error holding
// redis-cli's output. pipeline below 1 means redis-cli's default, 10. On
// a shared cluster Reshard returns [ErrShared].
func (c *Cluster) Reshard(from, to *Server, n, pipeline int) error {
	switch {
	case from != nil && from.shared:
		return fmt.Errorf("%w: Reshard", ErrShared)
	case from == nil || to == nil || from == to:
		return fmt.Errorf("redistest: reshard from %v to %v: want two nodes", from, to)
	case c.node(from.port) != from || c.node(to.port) != to:
		return fmt.Errorf("redistest: reshard from %s to %s: not both nodes of %v", from.Addr(), to.Addr(), c.Addrs())
	case n < 1 || n > NumSlots:
		return fmt.Errorf("redistest: reshard of %d slots: want 1 to %d", n, NumSlots)
	}
	cli, err := lookPath("redis-cli")
	if err != nil {
		return err
	}
	fromID, err := from.nodeID()
	if err != nil {
		return err
	}
	toID, err := to.nodeID()
	if err != nil {
		return err
	}
	args := []string{"--cluster", "reshard", from.Addr(),
		"--cluster-from", fromID, "--cluster-to", toID,
		"--cluster-slots", strconv.Itoa(n), "--cluster-yes"}
	if pipeline > 0 {
		args = append(args, "--cluster-pipeline", strconv.Itoa(pipeline))
	}
	out, err := runCLI(cli, reshardTimeout, args...)
	if err != nil {
		return err
	}
	// redis-cli exits 0 even when it stops at a node's error.
	if bytes.Contains(out, []byte("[ERR]")) {
		return fmt.Errorf("redistest: redis-cli --cluster reshard failed:\n%s", out)
	}
	return c.WaitOK()
}

// nodeID returns s's cluster node ID (CLUSTER MYID).
func (s *Server) nodeID() (string, error) {
	r, err := s.Do("CLUSTER", "MYID")
	if err != nil {
		return "", fmt.Errorf("redistest: node %s: %w", s.Addr(), err)
	}
	id, err := r.String()
	if err != nil {
		return "", fmt.Errorf("redistest: node %s: CLUSTER MYID: %w", s.Addr(), err)
	}
	return strings.TrimSpace(id), nil
}

// close is the final stop of every node.
func (c *Cluster) close() error {
	var errs []error
	for _, s := range c.servers {
		errs = append(errs, s.close())
	}
	return errors.Join(errs...)
}
