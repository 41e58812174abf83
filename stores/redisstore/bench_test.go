package redisstore_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores/redisstore"
	"github.com/sluicehq/sluice/stores/rueidisstore"
)

// baselineScript is the reference the Redis stores are measured against:
// a token bucket as it is commonly written, its state in a hash of floats,
// run with go-redis's Script (EVALSHA, EVAL on NOSCRIPT). It is not exact
// (floats written with tostring) and keeps no E; it is here for speed.
var baselineScript = redis.NewScript(`
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local s = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(s[1]) or burst
local ts = tonumber(s[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - ts) * rate)
local allowed = 0
if tokens >= cost then
	tokens = tokens - cost
	allowed = 1
end
redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts', now)
redis.call('EXPIRE', KEYS[1], math.ceil(burst / rate) + 1)
return {allowed, math.floor(tokens)}
`)

// benchLimit admits about half of a hot key's requests at these speeds, so
// that both branches of every script run.
var benchLimit = core.PerSecond(20_000).WithBurst(100)

// serverStats reads the counters a benchmark reports per decision: the
// calls of EVALSHA and EVAL and the µs Redis spent running them (the
// scripts' cost), and the server's CPU time in µs (the scripts, and
// reading and writing the commands).
func serverStats(b *testing.B, client *redis.Client) (calls, script, cpu float64) {
	b.Helper()
	info, err := client.Info(context.Background(), "commandstats", "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch name {
		case "cmdstat_evalsha", "cmdstat_eval":
			for field := range strings.SplitSeq(value, ",") {
				if n, ok := strings.CutPrefix(field, "calls="); ok {
					v, _ := strconv.ParseFloat(n, 64)
					calls += v
				}
				if n, ok := strings.CutPrefix(field, "usec="); ok {
					v, _ := strconv.ParseFloat(n, 64)
					script += v
				}
			}
		case "used_cpu_sys", "used_cpu_user":
			v, _ := strconv.ParseFloat(value, 64)
			cpu += v * 1e6
		}
	}
	return calls, script, cpu
}

func BenchmarkRedis(b *testing.B) {
	ctx := context.Background()
	addr := testAddr(b)
	admin := redis.NewClient(&redis.Options{Addr: addr})
	b.Cleanup(func() { admin.Close() })
	goredis := redis.NewClient(&redis.Options{Addr: addr})
	b.Cleanup(func() { goredis.Close() })
	ru, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(ru.Close)
	// rueidis as docs/redis.md recommends for throughput: it waits up to
	// 20µs for more commands before writing a pipeline.
	ruDelay, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, MaxFlushDelay: 20 * time.Microsecond})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(ruDelay.Close)
	rs, err := redisstore.New(goredis, redisstore.Config{Prefix: "bench:"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { rs.Close() })
	rus, err := rueidisstore.New(ru, rueidisstore.Config{Prefix: "bench:"})
	if err != nil {
		b.Fatal(err)
	}
	rusDelay, err := rueidisstore.New(ruDelay, rueidisstore.Config{Prefix: "bench:"})
	if err != nil {
		b.Fatal(err)
	}
	rate, burst := strconv.FormatInt(benchLimit.Rate(), 10), strconv.FormatInt(benchLimit.Burst(), 10)
	contenders := []struct {
		name  string
		allow func(key string) error
	}{
		{"baseline", func(key string) error {
			return baselineScript.Run(ctx, goredis, []string{"baseline:{" + key + "}"}, rate, burst, 1).Err()
		}},
		{"redisstore", func(key string) error {
			_, err := rs.Apply(ctx, core.Request{Key: key, Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: benchLimit}})
			return err
		}},
		{"rueidisstore", func(key string) error {
			_, err := rus.Apply(ctx, core.Request{Key: key, Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: benchLimit}})
			return err
		}},
		{"rueidisstore-delay", func(key string) error {
			_, err := rusDelay.Apply(ctx, core.Request{Key: key, Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: benchLimit}})
			return err
		}},
	}
	// Per-user keys: each goroutine takes the next of 10,000 users.
	users := make([]string, 10_000)
	for i := range users {
		users[i] = fmt.Sprintf("user:%d", i)
	}
	for _, keys := range []string{"hot", "users"} {
		for _, goroutines := range []int{1, 16, 64, 256} {
			for _, c := range contenders {
				b.Run(fmt.Sprintf("%s/%s/g=%d", keys, c.name, goroutines), func(b *testing.B) {
					var next atomic.Uint64
					key := func() string {
						if keys == "hot" {
							return "hot"
						}
						return users[next.Add(1)%uint64(len(users))]
					}
					calls0, script0, cpu0 := serverStats(b, admin)
					b.ReportAllocs()
					b.ResetTimer()
					if goroutines == 1 {
						for b.Loop() {
							if err := c.allow(key()); err != nil {
								b.Fatal(err)
							}
						}
					} else {
						b.SetParallelism(max(goroutines/runtimeProcs(), 1))
						b.RunParallel(func(pb *testing.PB) {
							for pb.Next() {
								if err := c.allow(key()); err != nil {
									b.Error(err)
									return
								}
							}
						})
					}
					b.StopTimer()
					calls1, script1, cpu1 := serverStats(b, admin)
					b.ReportMetric((calls1-calls0)/float64(b.N), "calls/op")
					b.ReportMetric((script1-script0)/float64(b.N), "script-µs/op")
					b.ReportMetric((cpu1-cpu0)/float64(b.N), "redis-µs/op")
				})
			}
		}
	}
}

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }
