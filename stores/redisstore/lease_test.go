package redisstore_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/stores/redisstore"
)

const leaseHolderEnv = "SLUICE_LEASE_HOLDER" // the address a holder process uses

// leaseLimit is 3 leases at once, each living 2 s unless renewed.
var leaseLimit = sluice.Per(3, 2*time.Second)

// TestLeasesOfAKilledProcess starts a process that acquires every slot of
// a key and holds them, and kills it with SIGKILL: its slots stay held
// (no release was sent) until their time to live has passed, and then
// every slot is free again.
func TestLeasesOfAKilledProcess(t *testing.T) {
	if addr := os.Getenv(leaseHolderEnv); addr != "" {
		holdLeases(addr)
		return
	}
	addr := testAddr(t)
	key := fmt.Sprintf("killed-%d", time.Now().UnixNano())
	cmd := exec.Command(os.Args[0], "-test.run=^TestLeasesOfAKilledProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), leaseHolderEnv+"="+addr, "SLUICE_LEASE_KEY="+key)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(out)
	for lines.Scan() && !strings.HasPrefix(lines.Text(), "holding") {
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL: no release is sent
		t.Fatal(err)
	}
	killed := time.Now()
	cmd.Wait()

	client := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { client.Close() })
	store, err := redisstore.New(client, redisstore.Config{Prefix: "leases:"})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := sluice.NewLimiter(store, algorithms.Concurrency, leaseLimit)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := lim.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if l.OK() {
		t.Fatalf("a slot was free right after the holder was killed: %+v", l.Decision)
	}
	t.Logf("after the kill: %d of %d slots free; the first frees in %v", l.Remaining, leaseLimit.Rate(), l.RetryAfter)
	time.Sleep(l.RetryAfter + 100*time.Millisecond)
	time.Sleep(max(0, leaseLimit.Period()-time.Since(killed)))
	for i := range leaseLimit.Rate() {
		l, err := lim.Acquire(ctx, key)
		if err != nil || !l.OK() {
			t.Fatalf("acquisition %d after the leases' time to live: %+v, %v; want every slot free", i, l, err)
		}
	}
}

// holdLeases is the holder process: it acquires every slot of the key,
// says so, and waits to be killed.
func holdLeases(addr string) {
	client := redis.NewClient(&redis.Options{Addr: addr})
	store, err := redisstore.New(client, redisstore.Config{Prefix: "leases:"})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	lim, _ := sluice.NewLimiter(store, algorithms.Concurrency, leaseLimit)
	for range leaseLimit.Rate() {
		if l, err := lim.Acquire(context.Background(), os.Getenv("SLUICE_LEASE_KEY")); err != nil || !l.OK() {
			fmt.Println("error", err)
			os.Exit(1)
		}
	}
	fmt.Println("holding")
	time.Sleep(time.Minute)
	os.Exit(1)
}
