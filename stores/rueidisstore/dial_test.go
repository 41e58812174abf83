package rueidisstore_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/rueidisstore"
)

// TestDial runs a client whose DialCtxFn is Dial against a plain server,
// one that requires a password (PING answers NOAUTH, and the handshake
// authenticates), one over TLS, a Cluster and a Sentinel set (whose
// sentinels Dial connects to as well): each decides.
func TestDial(t *testing.T) {
	t.Parallel()
	ca := redistest.NewCA(t, "dial CA")
	plain := redistest.Start(t)
	auth := redistest.Start(t)
	if _, err := auth.Do("CONFIG", "SET", "requirepass", "s3cret"); err != nil {
		t.Fatal(err)
	}
	secure := redistest.Start(t, redistest.WithTLS(ca))
	set := redistest.StartSentinel(t)
	for _, tc := range []struct {
		name string
		opt  rueidis.ClientOption
	}{
		{"plain", rueidis.ClientOption{InitAddress: []string{plain.Addr()}}},
		{"password", rueidis.ClientOption{InitAddress: []string{auth.Addr()}, Password: "s3cret"}},
		{"tls", rueidis.ClientOption{InitAddress: []string{secure.TLSAddr()}, TLSConfig: ca.ClientConfig()}},
		{"cluster", rueidis.ClientOption{InitAddress: redistest.SharedCluster(t).Addrs()}},
		{"sentinel", rueidis.ClientOption{InitAddress: set.SentinelAddrs(), Sentinel: rueidis.SentinelOption{MasterSet: set.MasterName()}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			opt := tc.opt
			opt.DisableCache, opt.DialCtxFn = true, rueidisstore.Dial
			client, err := rueidis.NewClient(opt)
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			store := newStore(t, client)
			// 30 keys: a Cluster's every master, all but surely.
			for i := range 30 {
				key := "dial-" + strconv.Itoa(i)
				d, err := store.Apply(context.Background(), core.Request{Key: key, Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(1)}})
				if err != nil || !d.Allowed {
					t.Fatalf("Apply(%q) through a client that dials with Dial = %+v, %v; want admitted", key, d, err)
				}
			}
		})
	}
}

// TestDialSilent dials a server that accepts connections and never
// answers: Dial fails by the context's deadline, or the dialer's timeout
// if that is sooner, with an error that names the address, and closes
// the connection it opened.
func TestDialSilent(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{}, 4)
	var wg sync.WaitGroup
	defer wg.Wait() // after the listener closes, below
	defer ln.Close()
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				// The client's PING arrives; no reply goes back. A read
				// that ends is the client closing the connection.
				buf := make([]byte, 64)
				for {
					if _, err := c.Read(buf); err != nil {
						c.Close()
						closed <- struct{}{}
						return
					}
				}
			})
		}
	})
	addr := ln.Addr().String()
	for _, tc := range []struct {
		name    string
		ctx     time.Duration // the context's deadline, 0 for none
		timeout time.Duration // the dialer's
		want    time.Duration
	}{
		{"context", 50 * time.Millisecond, time.Second, 50 * time.Millisecond},
		{"dialer", 0, 80 * time.Millisecond, 80 * time.Millisecond},
	} {
		// Started before the context's deadline is set, so that the
		// time measured is never short of it.
		start := time.Now()
		ctx := context.Background()
		if tc.ctx > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, tc.ctx)
			defer cancel()
		}
		conn, err := rueidisstore.Dial(ctx, addr, &net.Dialer{Timeout: tc.timeout}, nil)
		took := time.Since(start)
		if err == nil {
			conn.Close()
			t.Fatalf("%s: Dial of a server that never answers succeeded", tc.name)
		}
		if !strings.Contains(err.Error(), addr) || !errors.Is(err, context.DeadlineExceeded) && !isTimeout(err) {
			t.Errorf("%s: Dial = %v; want a timeout naming %s", tc.name, err, addr)
		}
		// The bound leaves the machine 2 s: the test asserts that Dial
		// gives up by the sooner of the two deadlines (not after
		// rueidis's 5 s default), not how promptly a loaded machine
		// wakes it.
		if took < tc.want || took > tc.want+2*time.Second {
			t.Errorf("%s: Dial failed after %v, want after %v (and within 2 s more, short of rueidis's default of 5 s)", tc.name, took, tc.want)
		}
		select {
		case <-closed:
		case <-time.After(time.Second):
			t.Errorf("%s: the connection Dial opened was not closed", tc.name)
		}
	}
}

func isTimeout(err error) bool {
	ne, ok := errors.AsType[net.Error](err)
	return ok && ne.Timeout()
}
