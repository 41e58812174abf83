package rueidisstore_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
)

// TestCallerLeavesAStuckDial drops the client's connections and makes
// every dial after that hang, whatever its context says, as rueidis
// holds each call behind a dial of its connection (and behind the
// one-second close of a handshake that timed out): each decision must
// still return by its own deadline, with the context's error, while the
// store's call waits on the dial. A stall cannot break the bound: a
// caller held by the dial is held until the test releases it.
func TestCallerLeavesAStuckDial(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var stuck atomic.Bool
	var held atomic.Int64 // dials hanging
	release := make(chan struct{})
	dial := func(ctx context.Context, addr string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
		if stuck.Load() {
			held.Add(1)
			<-release
			return nil, errors.New("the test's dial, released")
		}
		return d.DialContext(ctx, "tcp", addr)
	}
	client, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: []string{srv.Addr()}, ForceSingleClient: true, DisableCache: true, DisableRetry: true,
		DialCtxFn: dial,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	store := newStore(t, client)
	t.Cleanup(func() { store.Close() })
	t.Cleanup(func() { close(release) }) // first: the store's call returns
	req := core.Request{Key: "k", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(1000)}}
	if _, err := store.Apply(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	stuck.Store(true)
	if _, err := srv.Do("CLIENT", "KILL", "TYPE", "normal"); err != nil {
		t.Fatal(err)
	}
	const deadline = 50 * time.Millisecond
	// The first calls may find the dropped connection and fail at once;
	// then one dials, and hangs.
	for i := 0; i < 20 && held.Load() < 1 || i < 3; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		done := make(chan error, 1)
		go func() {
			_, err := store.Apply(ctx, req)
			done <- err
		}()
		select {
		case err := <-done:
			cancel()
			if err == nil {
				t.Fatalf("call %d: decided through a client whose connections are gone", i)
			}
			if held.Load() > 0 && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("call %d, a dial hanging: %v, want the context's deadline", i, err)
			}
		case <-time.After(deadline + 5*time.Second):
			cancel()
			t.Fatalf("call %d: held 5 s past its %v deadline by a dial that hangs (%d dials hanging)", i, deadline, held.Load())
		}
	}
	if held.Load() == 0 {
		t.Fatal("no dial was made: the test did not test its case")
	}
}
