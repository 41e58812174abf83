package redisstore_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/redisstore"
)

// TestQuietDialFailures checks the logger docs/redis.md recommends:
// while Redis is down, go-redis writes "connection pool: failed to dial"
// to standard error for every call that finds no connection, and
// logging.NewBlacklistLogger([]string{"failed to dial"}) keeps those
// lines out and every other. The logger is go-redis's, for the whole
// process: the test sets it, to a file, and puts the default back.
func TestQuietDialFailures(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(logging.Enable)
	for _, tc := range []struct {
		name      string
		setLogger func() // run while os.Stderr is the test's file
		lines     bool   // whether dial failures are written
	}{
		{"only dial failures", func() { redis.SetLogger(logging.NewWhitelistLogger([]string{"failed to dial"})) }, true},
		{"recommended", func() { redis.SetLogger(logging.NewBlacklistLogger([]string{"failed to dial"})) }, false},
	} {
		out, err := os.CreateTemp(t.TempDir(), "stderr")
		if err != nil {
			t.Fatal(err)
		}
		stderr := os.Stderr
		os.Stderr = out // the logger writes to the os.Stderr of its making
		tc.setLogger()
		os.Stderr = stderr

		client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, DialerRetries: 1})
		store, err := redisstore.New(client, redisstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		lim, err := sluice.NewLimiter(store, algorithms.TokenBucket, sluice.PerSecond(10))
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if _, err := lim.Allow(context.Background(), "k"); err == nil {
				t.Fatalf("%s: a decision with Redis down succeeded", tc.name)
			}
		}
		store.Close()
		client.Close()
		logged, err := os.ReadFile(out.Name())
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(string(logged), "failed to dial"); got != tc.lines {
			t.Errorf("%s: dial failures written: %v, want %v:\n%s", tc.name, got, tc.lines, logged)
		}
		out.Close()
	}
}
