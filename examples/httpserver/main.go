// Command httpserver is a small HTTP server limited by sluice's
// middleware, to try the headers and statuses with curl:
//
//	go run ./examples/httpserver [-addr 127.0.0.1:8080] [-trust 10.0.0.0/8,...] [-redis localhost:6379]
//
// Each user (by X-API-Key header, else by address; see -trust for
// proxies) may send a burst of 5 requests, then 1 a second, and 1000 a
// day; the whole server serves at most 50 a second. The three limits are
// one sluice.Stack, charged all or nothing: a request the daily quota
// denies costs nothing under the other two. /expensive costs 5. The
// limits live in an in-process store (memstore), or in Redis when -redis
// gives its address, so that several instances share them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/contrib/httplimit"
	"github.com/sluicehq/sluice/stores/memstore"
	"github.com/sluicehq/sluice/stores/redisstore"
)

// limits are the server's three rules.
type limits struct {
	perUser sluice.Limit // a token bucket per user: bursts, then a steady rate
	daily   sluice.Limit // a fixed window of a day per user
	global  sluice.Limit // a token bucket for the whole server
}

var defaultLimits = limits{
	perUser: sluice.PerSecond(1).WithBurst(5),
	daily:   sluice.PerDay(1000),
	global:  sluice.PerSecond(50).WithBurst(100),
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "`address` to listen on")
	trust := flag.String("trust", "", "comma-separated `CIDRs` of reverse proxies whose X-Forwarded-For to believe (default: none)")
	redisAddr := flag.String("redis", "", "`address` of a Redis server to keep the limits in (default: in memory)")
	flag.Parse()
	if err := run(*addr, *trust, *redisAddr); err != nil {
		log.Fatal(err)
	}
}

func run(addr, trust, redisAddr string) error {
	proxies, err := parsePrefixes(trust)
	if err != nil {
		return err
	}
	store, where, closeStore, err := newStore(redisAddr)
	if err != nil {
		return err
	}
	defer closeStore()
	handler, err := newHandler(store, defaultLimits, proxies)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	printUsage(os.Stdout, "http://"+ln.Addr().String(), where)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return err
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// newStore returns the store the limits are kept in, what it is, and a
// function that releases it: an in-process memstore when redisAddr is
// empty (limits per process, forgotten on restart), else a redisstore on
// the Redis server at redisAddr, shared by every instance that uses it.
// The middleware sees only a sluice.Store either way.
func newStore(redisAddr string) (sluice.Store, string, func() error, error) {
	if redisAddr == "" {
		store, err := memstore.New(memstore.Config{})
		if err != nil {
			return nil, "", nil, err
		}
		return store, "memstore", store.Close, nil
	}
	// The options docs/redis.md recommends: among them no retries, as a
	// script whose reply timed out may have run, and running it again
	// would charge the request twice.
	client := redis.NewUniversalClient(redisstore.ClientOptions([]string{redisAddr}, 0))
	store, err := redisstore.New(client, redisstore.Config{})
	if err != nil {
		client.Close()
		return nil, "", nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		// Start anyway: requests get 503s until Redis answers.
		log.Printf("redis at %s does not answer (%v); requests get 503 until it does", redisAddr, err)
	}
	return store, "redis " + redisAddr, func() error { store.Close(); return client.Close() }, nil
}

// newHandler returns the server's routes behind the rate-limit middleware:
// "/" answers hello, "/expensive" costs 5.
func newHandler(store sluice.Store, l limits, proxies []netip.Prefix) (http.Handler, error) {
	stack, err := sluice.NewStack(store,
		sluice.Rule{Name: "per-user", Algorithm: algorithms.TokenBucket, Limit: l.perUser},
		sluice.Rule{Name: "daily", Algorithm: algorithms.FixedWindow, Limit: l.daily},
		sluice.Rule{Name: "global", Algorithm: algorithms.TokenBucket, Limit: l.global},
	)
	if err != nil {
		return nil, err
	}
	client, err := httplimit.NewClientIP(httplimit.IPConfig{TrustedProxies: proxies})
	if err != nil {
		return nil, err
	}
	mw, err := httplimit.New(stack,
		// A user is its API key or, without one, its address. A real
		// server would key by an identity it has authenticated: anyone
		// can make up API keys.
		httplimit.WithKeyFunc(httplimit.FirstKey(httplimit.HeaderKey("X-API-Key"), client.Key)),
		httplimit.WithKey("global", httplimit.GlobalKey),
		httplimit.WithCost(func(r *http.Request) int64 {
			if r.URL.Path == "/expensive" {
				return 5
			}
			return 1
		}),
		httplimit.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
			log.Printf("rate limiter: %v", err)
			httplimit.WriteUnavailable(w, r, err)
		}),
	)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello from sluice\n")
	})
	mux.HandleFunc("/expensive", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "that was expensive\n")
	})
	return mw.Handler(mux), nil
}

// parsePrefixes parses a comma-separated list of CIDR prefixes.
func parsePrefixes(s string) ([]netip.Prefix, error) {
	var ps []netip.Prefix
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("-trust: %w", err)
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// printUsage prints how to try the server at base, whose limits are kept
// in where.
func printUsage(w io.Writer, base, where string) {
	fmt.Fprintf(w, `sluice example server on %[1]s (limits in %[5]s)
rules, charged all or nothing: per-user %[2]v (token bucket), daily %[3]v per user (fixed window),
global %[4]v (token bucket); a user is its X-API-Key, else its address; /expensive costs 5

try:
  curl -i %[1]s/
  for i in $(seq 7); do curl -s -o /dev/null -w '%%{http_code} ' %[1]s/; done; echo
  curl -i -H 'X-API-Key: alice' %[1]s/expensive
  curl -i -H 'X-Forwarded-For: 203.0.113.9' %[1]s/   # ignored unless -trust covers 127.0.0.1

Ctrl-C stops it.
`, base, defaultLimits.perUser, defaultLimits.daily, defaultLimits.global, where)
}
