package rediscli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/stores/redisstore"
	"github.com/sluicehq/sluice/stores/rueidisstore"
)

// maxSamples bounds the latencies bench keeps for its percentiles: about
// 8 bytes each.
const maxSamples = 1 << 22

// runBench is "sluice bench": decisions against the user's own Redis,
// with latency percentiles, throughput and calls per decision.
func runBench(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		addr     = fs.String("redis", "localhost:6379", "the Redis `address`; several, comma-separated, for a Cluster")
		cluster  = fs.Bool("cluster", false, "the addresses are a Redis Cluster's")
		clientN  = fs.String("client", "rueidis", "the `client`: rueidis (rueidisstore) or go-redis (redisstore)")
		prefix   = fs.String("prefix", "sluice-bench:", "the key `prefix`; the keys expire on their own")
		algName  = fs.String("algorithm", "token-bucket", "the algorithm `name`")
		limitArg = fs.String("limit", "1000/s", "the `limit`: N/PERIOD, then optionally burst N, such as 1000/s or 100/s burst 500")
		keys     = fs.Int("keys", 1, "how many distinct `keys`: 1 for one hot key")
		workers  = fs.Int("concurrency", 64, "how many `goroutines` decide at once")
		duration = fs.Duration("duration", 10*time.Second, "how long to run")
	)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, "Usage: sluice bench [flags]\n\nBench makes decisions against your Redis for -duration from -concurrency\ngoroutines and reports throughput, latency percentiles, the share\nadmitted and the script calls the server saw per decision. Its keys\nexpire on their own.\n\nFlags:\n")
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintf(stderr, "sluice bench: %v (see sluice bench -h)\n", err)
		return 2
	}
	alg, err := algorithms.ByName(*algName)
	if err != nil {
		fmt.Fprintf(stderr, "sluice bench: -algorithm: %v\n", err)
		return 2
	}
	limit, err := sluice.ParseLimit(*limitArg)
	if err != nil {
		fmt.Fprintf(stderr, "sluice bench: -limit: %v\n", err)
		return 2
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "sluice bench: unexpected argument %q\n", fs.Arg(0))
		return 2
	case *keys < 1 || *workers < 1 || *duration <= 0:
		fmt.Fprintln(stderr, "sluice bench: -keys and -concurrency must be at least 1, -duration positive")
		return 2
	case *clientN != "rueidis" && *clientN != "go-redis":
		fmt.Fprintf(stderr, "sluice bench: -client %q: want rueidis or go-redis\n", *clientN)
		return 2
	}
	addrs := strings.Split(*addr, ",")
	opts := redisstore.ClientOptions(addrs, 0)
	opts.IsClusterMode = *cluster
	gr := redis.NewUniversalClient(opts)
	defer gr.Close()
	var store sluice.Store
	if *clientN == "go-redis" {
		store, err = redisstore.New(gr, redisstore.Config{Prefix: *prefix})
	} else {
		var rc rueidis.Client
		opt := rueidisstore.ClientOption(addrs, 0)
		opt.ForceSingleClient = !*cluster
		rc, err = rueidis.NewClient(opt)
		if err == nil {
			defer rc.Close()
			store, err = rueidisstore.New(rc, rueidisstore.Config{Prefix: *prefix})
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice bench: %s: %v\n", *addr, err)
		return 1
	}
	lim, err := sluice.NewLimiter(store, alg, limit)
	if err != nil {
		fmt.Fprintf(stderr, "sluice bench: -limit with -algorithm %s: %v\n", alg.Name(), err)
		return 2
	}
	r, err := bench(gr, lim, *keys, *workers, *duration, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "sluice bench: %s: %v\n", *addr, err)
		return 1
	}
	r.print(stdout, fmt.Sprintf("%s, %s, %v, %d key(s), %d goroutines, %v", *clientN, alg.Name(), limit, *keys, *workers, *duration))
	return 0
}

// result is what a bench run measured.
type result struct {
	decisions, allowed, errors int64
	calls                      int64 // script calls the server counted; -1 if unknown
	elapsed                    time.Duration
	latencies                  []time.Duration
	firstErr                   error
}

// bench runs the decisions and measures them, printing progress to
// progress once a second.
func bench(server redis.UniversalClient, lim *sluice.Limiter, keys, workers int, d time.Duration, progress io.Writer) (*result, error) {
	ctx := context.Background()
	before, err := scriptCalls(ctx, server)
	if err != nil {
		return nil, err
	}
	r := &result{}
	var decisions, allowed, failures atomic.Int64
	var mu sync.Mutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			lat := make([]time.Duration, 0, 1024)
			for i := w; ; i += workers {
				select {
				case <-stop:
					mu.Lock()
					if room := maxSamples - len(r.latencies); room > 0 {
						r.latencies = append(r.latencies, lat[:min(len(lat), room)]...)
					}
					mu.Unlock()
					return
				default:
				}
				t := time.Now()
				dec, err := lim.Allow(ctx, "k"+strconv.Itoa(i%keys))
				if len(lat) < maxSamples/workers+1 {
					lat = append(lat, time.Since(t))
				}
				decisions.Add(1)
				switch {
				case err != nil:
					if failures.Add(1) == 1 {
						mu.Lock()
						r.firstErr = err
						mu.Unlock()
					}
				case dec.Allowed:
					allowed.Add(1)
				}
			}
		})
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	end := time.NewTimer(d)
	defer end.Stop()
	for done := false; !done; {
		select {
		case <-tick.C:
			el := time.Since(start)
			fmt.Fprintf(progress, "%v: %d decisions (%.0f/s)\n", el.Round(time.Second), decisions.Load(), float64(decisions.Load())/el.Seconds())
		case <-end.C:
			done = true
		}
	}
	close(stop)
	wg.Wait()
	r.elapsed = time.Since(start)
	r.decisions, r.allowed, r.errors = decisions.Load(), allowed.Load(), failures.Load()
	r.calls = -1
	if after, err := scriptCalls(ctx, server); err == nil {
		r.calls = after - before
	}
	slices.Sort(r.latencies)
	return r, nil
}

// scriptCalls returns the EVAL and EVALSHA calls the servers have run,
// less those that failed: an EVALSHA answered NOSCRIPT (which the client
// follows with an EVAL) decided nothing.
func scriptCalls(ctx context.Context, c redis.UniversalClient) (int64, error) {
	var total int64
	count := func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		for line := range strings.Lines(info) {
			name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval") {
				continue
			}
			for kv := range strings.SplitSeq(rest, ",") {
				if v, ok := strings.CutPrefix(kv, "calls="); ok {
					n, _ := strconv.ParseInt(v, 10, 64)
					atomic.AddInt64(&total, n)
				} else if v, ok := strings.CutPrefix(kv, "failed_calls="); ok {
					n, _ := strconv.ParseInt(v, 10, 64)
					atomic.AddInt64(&total, -n)
				}
			}
		}
		return nil
	}
	var err error
	switch c := c.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, count)
	case *redis.Client:
		err = count(ctx, c)
	default:
		return 0, fmt.Errorf("cannot count calls through %T", c)
	}
	return total, err
}

func (r *result) print(w io.Writer, title string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "run\t%s\n", title)
	fmt.Fprintf(tw, "decisions\t%d in %v: %.0f/s\n", r.decisions, r.elapsed.Round(time.Millisecond), float64(r.decisions)/r.elapsed.Seconds())
	if r.decisions > 0 {
		fmt.Fprintf(tw, "admitted\t%d (%.1f%%)\n", r.allowed, 100*float64(r.allowed)/float64(r.decisions))
	}
	if n := len(r.latencies); n > 0 {
		q := func(p float64) time.Duration { return r.latencies[min(int(p*float64(n)), n-1)] }
		fmt.Fprintf(tw, "latency\tp50 %v, p90 %v, p99 %v, p99.9 %v, max %v\n", q(0.50), q(0.90), q(0.99), q(0.999), r.latencies[n-1])
	}
	if r.calls >= 0 && r.decisions > 0 {
		fmt.Fprintf(tw, "script calls\t%d run by the server: %.3f per decision (other clients' count too)\n", r.calls, float64(r.calls)/float64(r.decisions))
	}
	if r.errors > 0 {
		fmt.Fprintf(tw, "errors\t%d, the first: %v\n", r.errors, r.firstErr)
	}
	tw.Flush()
}
