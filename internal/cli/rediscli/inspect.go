package rediscli

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores/redisstore"
)

// runInspect is "sluice inspect": a key's state and TTL in Redis, and,
// given the limit, the decision a request would get now.
func runInspect(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		addr     = fs.String("redis", "localhost:6379", "the Redis `address`; several, comma-separated, for a Cluster")
		cluster  = fs.Bool("cluster", false, "the addresses are a Redis Cluster's")
		prefix   = fs.String("prefix", redisstore.DefaultPrefix, "the store's key `prefix`")
		algName  = fs.String("algorithm", "token-bucket", "the algorithm `name` the key is limited by (a stack's rule: name/rule)")
		limitArg = fs.String("limit", "", "the `limit` (N/PERIOD, then optionally burst N, such as 10/min burst 50) to show the decision a request of cost 1 would get now")
		burst    = fs.Int64("burst", 0, "the limit's burst `N`; 0 means the rate")
		timeout  = fs.Duration("timeout", 2*time.Second, "how long to wait for Redis")
	)
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, "Usage: sluice inspect [flags] KEY\n\nInspect prints a key's state and TTL as a Redis store keeps them, and,\ngiven -limit, the decision a request would get now (a peek: nothing is\ncharged).\n\nFlags:\n")
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintf(stderr, "sluice inspect: %v (see sluice inspect -h)\n", err)
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "sluice inspect: want one KEY after the flags (see sluice inspect -h)")
		return 2
	}
	key := fs.Arg(0)
	if err := core.ValidateKey(key); err != nil {
		fmt.Fprintf(stderr, "sluice inspect: %v\n", err)
		return 2
	}
	base, rule, _ := strings.Cut(*algName, "/")
	alg, err := algorithms.ByName(base)
	if err != nil {
		fmt.Fprintf(stderr, "sluice inspect: -algorithm: %v\n", err)
		return 2
	}
	if rule != "" {
		alg = core.Named(alg, rule)
	}
	var limit core.Limit
	if *limitArg != "" {
		var err error
		if limit, err = core.ParseLimit(*limitArg); err != nil {
			fmt.Fprintf(stderr, "sluice inspect: -limit: %v\n", err)
			return 2
		}
		if *burst != 0 {
			limit = limit.WithBurst(*burst)
		}
		if err := limit.Validate(); err != nil {
			fmt.Fprintf(stderr, "sluice inspect: -limit: %v\n", err)
			return 2
		}
	}

	opts := redisstore.ClientOptions(strings.Split(*addr, ","), *timeout)
	opts.IsClusterMode = *cluster
	client := redis.NewUniversalClient(opts)
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3**timeout)
	defer cancel()
	if err := inspect(ctx, client, *prefix, key, alg, limit, stdout); err != nil {
		fmt.Fprintf(stderr, "sluice inspect: %s: %v\n", *addr, err)
		return 1
	}
	return 0
}

// inspect prints what the store keeps for key under alg.
func inspect(ctx context.Context, client redis.UniversalClient, prefix, key string, alg core.Algorithm, limit core.Limit, w io.Writer) error {
	store, err := redisstore.New(client, redisstore.Config{Prefix: prefix})
	if err != nil {
		return fmt.Errorf("-prefix: %w", err)
	}
	defer store.Close()
	rkey := store.Key(key, alg)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "redis key\t%s\n", rkey)
	now, err := client.Time(ctx).Result()
	if err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	fmt.Fprintf(tw, "server time\t%s\n", now.UTC().Format(time.RFC3339Nano))
	value, err := client.Get(ctx, rkey).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		fmt.Fprintf(tw, "state\tnone: the key is fresh (never charged, or forgotten)\n")
	case err != nil:
		return fmt.Errorf("redis: %w", err)
	case len(value) < 48 || len(value)%16 != 0:
		return fmt.Errorf("%s holds %d bytes, not a sluice state (6 doubles and pairs)", rkey, len(value))
	default:
		var f [6]int64
		for i := range f {
			f[i] = int64(math.Float64frombits(binary.LittleEndian.Uint64(value[8*i:])))
		}
		at := func(us int64) string { return time.UnixMicro(us).UTC().Format(time.RFC3339Nano) }
		fmt.Fprintf(tw, "last change\t%s (Last)\n", at(f[0]))
		fmt.Fprintf(tw, "forgotten from\t%s (Expires), in %v\n", at(f[4]), time.Duration(f[4]-now.UnixMicro())*time.Microsecond)
		fmt.Fprintf(tw, "fields\tVals=%v\n", f[1:4])
		if f[5] > 0 {
			fmt.Fprintf(tw, "lives until at least\t%s (the key's expiry as last set)\n", at(f[5]))
		}
		if n := (len(value) - 48) / 16; n > 0 {
			fmt.Fprintf(tw, "entries\t%d\n", n)
		}
		ttl, err := client.PTTL(ctx, rkey).Result()
		if err != nil {
			return fmt.Errorf("redis: %w", err)
		}
		fmt.Fprintf(tw, "ttl\t%v\n", ttl)
	}
	if limit != (core.Limit{}) {
		d, err := store.Apply(ctx, core.Request{Key: key, Cost: 1, Op: core.OpPeek, Terms: &core.Terms{Algorithm: alg, Limit: limit}})
		if err != nil {
			return err
		}
		fmt.Fprintf(tw, "a request now\t%s under %v\n", describeDecision(d), limit)
	}
	return tw.Flush()
}

// describeDecision says what a decision means, in a line.
func describeDecision(d core.Decision) string {
	if d.Allowed {
		return "allowed, " + strconv.FormatInt(d.Remaining, 10) + " of " + strconv.FormatInt(d.Limit, 10) + " left after it, full again in " + d.ResetAfter.String()
	}
	if d.Unsatisfiable() {
		return "never allowed: its cost exceeds the limit's capacity"
	}
	return fmt.Sprintf("denied, retry in %v (%d of %d left)", d.RetryAfter, d.Remaining, d.Limit)
}
