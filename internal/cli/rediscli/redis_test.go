package rediscli

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/redisstore"
)

func TestInspect(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { client.Close() })
	store, err := redisstore.New(client, redisstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := sluice.NewLimiter(store, algorithms.TokenBucket, sluice.PerMinute(10).WithBurst(50))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := lim.Allow(context.Background(), "user:42"); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		args []string
		code int
		want []string // lines of stdout or stderr to find
	}{
		{[]string{"-redis", srv.Addr(), "-limit", "10/min", "-burst", "50", "user:42"}, 0, []string{
			"redis key sluice:{user:42}:token-bucket",
			"ttl ",
			"a request now allowed, 46 of 50 left after it",
		}},
		{[]string{"-redis", srv.Addr(), "-algorithm", "gcra", "user:7"}, 0, []string{"state none: the key is fresh"}},
		{[]string{"-redis", srv.Addr()}, 2, []string{"want one KEY"}},
		{[]string{"-redis", srv.Addr(), "-algorithm", "leaky", "k"}, 2, []string{`unknown algorithm "leaky"`}},
		{[]string{"-redis", srv.Addr(), "-limit", "10", "k"}, 2, []string{`-limit: sluice: invalid limit: "10": want N/PERIOD`}},
		{[]string{"-redis", srv.Addr(), "-prefix", "a{b}", "k"}, 1, []string{"-prefix"}},
	} {
		var out, errs bytes.Buffer
		code := run(append([]string{"inspect"}, tc.args...), &out, &errs)
		text := strings.Join(strings.Fields(out.String()+errs.String()), " ") // columns vary in width
		if code != tc.code {
			t.Errorf("sluice inspect %v = %d, want %d\n%s", tc.args, code, tc.code, text)
		}
		for _, w := range tc.want {
			if !strings.Contains(text, w) {
				t.Errorf("sluice inspect %v printed no %q:\n%s", tc.args, w, text)
			}
		}
	}
}

// TestInspectUnreachable: a Redis that is not there is an error within
// the timeout, not a hang.
func TestInspectUnreachable(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	var out, errs bytes.Buffer
	start := time.Now()
	if code := run([]string{"inspect", "-redis", addr, "-timeout", "200ms", "k"}, &out, &errs); code != 1 || !strings.Contains(errs.String(), "redis") {
		t.Errorf("inspect of a stopped Redis = %d, %q; want 1 and the error", code, errs.String())
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("inspect of a stopped Redis took %v", took)
	}
}

// perDecision finds the script calls per decision sluice bench reports.
var perDecision = regexp.MustCompile(`([0-9.]+) per decision`)

// TestBench runs a short bench through each client against a real
// redis-server: it reports its figures, at most one script call per
// decision, and progress.
func TestBench(t *testing.T) {
	srv := redistest.Start(t)
	for _, client := range []string{"rueidis", "go-redis"} {
		var out, errs bytes.Buffer
		code := run([]string{"bench", "-redis", srv.Addr(), "-client", client, "-duration", "1200ms", "-concurrency", "4", "-keys", "10", "-limit", "100/s"}, &out, &errs)
		text := strings.Join(strings.Fields(out.String()), " ")
		if code != 0 {
			t.Fatalf("%s: sluice bench = %d\n%s%s", client, code, out.String(), errs.String())
		}
		for _, w := range []string{"decisions", "latency p50", "p99.9", "per decision", "admitted"} {
			if !strings.Contains(text, w) {
				t.Errorf("%s: sluice bench printed no %q:\n%s", client, w, out.String())
			}
		}
		// At most one script call a decision: concurrent decisions to one
		// server may share one.
		if m := perDecision.FindStringSubmatch(text); m == nil {
			t.Errorf("%s: sluice bench printed no script calls per decision:\n%s", client, out.String())
		} else if n, err := strconv.ParseFloat(m[1], 64); err != nil || n <= 0 || n > 1 {
			t.Errorf("%s: %s script calls per decision, want more than 0 and at most 1", client, m[1])
		}
		if !strings.Contains(errs.String(), "1s: ") {
			t.Errorf("%s: no progress line on stderr: %q", client, errs.String())
		}
		t.Logf("%s:\n%s", client, out.String())
	}
	var out, errs bytes.Buffer
	if code := run([]string{"bench", "-client", "memcached"}, &out, &errs); code != 2 {
		t.Errorf("bench -client memcached = %d, want 2", code)
	}
}

// run is the program of cmd/sluice-redis.
func run(args []string, stdout, stderr io.Writer) int {
	return cli.Run(args, stdout, stderr, cli.Commands(Commands()...))
}
