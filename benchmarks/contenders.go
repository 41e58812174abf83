package benchmarks

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	limiterstore "github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	throttledredis "github.com/throttled/throttled/v2/store/goredisstore.v9"
	throttledmem "github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ululemem "github.com/ulule/limiter/v3/drivers/store/memory"
	ululeredis "github.com/ulule/limiter/v3/drivers/store/redis"
	"golang.org/x/time/rate"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/stores/layered"
	"github.com/sluicehq/sluice/stores/memstore"
	"github.com/sluicehq/sluice/stores/redisstore"
	"github.com/sluicehq/sluice/stores/rueidisstore"
	"github.com/sluicehq/sluice/telemetry"
)

// A Limit is the one limit every contender is given, in the terms every
// library shares: Rate per second, and at most Burst at once.
type Limit struct {
	Rate  int
	Burst int
}

// A Contender is one library (or one reference implementation) deciding
// whether a key may make one request.
type Contender struct {
	// Name identifies the contender in benchmark names and tables.
	Name string
	// Sluice is true for sluice's own stores.
	Sluice bool
	// Allow decides one request of key. An error is the library's: a
	// failed Redis call, or a retry loop that gave up.
	Allow func(ctx context.Context, key string) (bool, error)
	// Close releases the contender's clients and goroutines.
	Close func()
	// ModeAnswers, for a chain contender, returns how many decisions so
	// far its breaker answered by its mode (fail-open by default) because
	// the store failed or missed the per-call deadline, instead of the
	// store deciding. It is nil for the other contenders.
	ModeAnswers func() int64
	// CircuitClosed, for a chain contender, reports whether its breaker's
	// circuit is closed: whether the store decides the calls. It is nil
	// for the other contenders.
	CircuitClosed func() bool
}

// The contenders' names, as the benchmarks and docs/benchmarks.md use them.
const (
	NameRedisStore    = "sluice-redisstore"
	NameRueidisStore  = "sluice-rueidisstore"
	NameRedisChain    = "sluice-redis-chain"
	NameRueidisChain  = "sluice-rueidis-chain"
	NameRedisRate     = "redis_rate"
	NameThrottled     = "throttled"
	NameUlule         = "ulule-limiter"
	NameRefScript     = "ref-evalsha"
	NameRefClient     = "ref-3-commands"
	NameRefWatch      = "ref-watch-multi"
	NameMemStore      = "sluice-memstore"
	NameTimeRate      = "x/time/rate+sync.Map"
	NameGoLimiter     = "sethvargo/go-limiter"
	NameThrottledMem  = "throttled-memstore"
	NameUluleMem      = "ulule-limiter-memory"
	memoryBoundedKeys = 1 << 20 // every bounded in-memory store holds 1M keys, as memstore does by default
)

// CeilingCell names BenchmarkRedis's cell, beside the contenders at 64
// goroutines, that measures the server's pipelined ceiling for sluice's
// own command: raw-resp (a load generator of TestCeiling) sends it from
// 64 connections, 16 to a pipeline. Its figure is EVALSHA/s.
const CeilingCell = "ceiling-raw-resp"

// Chains pairs each chain contender with the bare store contender under
// it: the chain is what users deploy (see [RedisContenders]), the store
// what it adds its cost to. They are sluice's own, not competitors.
var Chains = []struct{ Chain, Store string }{
	{NameRedisChain, NameRedisStore},
	{NameRueidisChain, NameRueidisStore},
}

// RedisContenders returns every contender that keeps its state in the
// Redis at addr, each with its own client and default client options, and
// its keys under its own prefix.
//
// Besides the bare stores it returns sluice's production chain over each
// of redisstore and rueidisstore ([Chains]): telemetry with the tracer
// provider of [TracerProvider] and the no-op meter provider, over a
// policy without options, over a breaker with default options, over
// layered with the zero Config, over the store with its default Config.
func RedisContenders(addr string, lim Limit) ([]Contender, error) {
	return redisContenders(addr, lim)
}

// redisContenders is [RedisContenders] with the chains' breakers
// configured by breaker instead of the defaults, for the tests.
func redisContenders(addr string, lim Limit, breaker ...policy.BreakerOption) ([]Contender, error) {
	starts := []func(string, Limit) (Contender, error){
		newRedisStore, newRueidisStore,
		newRedisChain(breaker), newRueidisChain(breaker),
		newRedisRate, newThrottled, newUlule,
		newRefScript, newRefClient, newRefWatch,
	}
	return startAll(len(starts), func(i int) (Contender, error) { return starts[i](addr, lim) })
}

// memoryStarts make the in-process contenders, in the order
// [MemoryContenders] returns them.
var memoryStarts = []func(Limit) (Contender, error){
	newMemStore, newTimeRate, newGoLimiter, newThrottledMem, newUluleMem,
}

// MemoryContenders returns every in-process contender.
func MemoryContenders(lim Limit) ([]Contender, error) {
	return startAll(len(memoryStarts), func(i int) (Contender, error) { return memoryStarts[i](lim) })
}

// startAll starts n contenders with start, closing those already started
// if one fails.
func startAll(n int, start func(i int) (Contender, error)) ([]Contender, error) {
	var out []Contender
	for i := range n {
		c, err := start(i)
		if err != nil {
			for _, c := range out {
				c.Close()
			}
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// sluiceContender decides with a sluice.Limiter over store: the API a user
// calls, not the store's Apply. If modeAnswers is not nil it counts the
// decisions a breaker's mode answered instead of the store.
func sluiceContender(name string, store sluice.Store, lim Limit, closeClient func(), modeAnswers *atomic.Int64) (Contender, error) {
	limiter, err := sluice.NewLimiter(store, algorithms.TokenBucket, sluice.PerSecond(int64(lim.Rate)).WithBurst(int64(lim.Burst)))
	if err != nil {
		store.Close()
		closeClient()
		return Contender{}, err
	}
	return Contender{
		Name:   name,
		Sluice: true,
		Allow: func(ctx context.Context, key string) (bool, error) {
			d, err := limiter.Allow(ctx, key)
			if modeAnswers != nil && isModeAnswer(d.Source) {
				modeAnswers.Add(1)
			}
			return d.Allowed, err
		},
		Close: func() {
			store.Close()
			closeClient()
		},
	}, nil
}

// isModeAnswer reports whether a decision is a breaker's answer for a store
// that failed or was too slow.
func isModeAnswer(s sluice.Source) bool {
	return s == sluice.SourceFailOpen || s == sluice.SourceFailClosed || s == sluice.SourceDegraded
}

func newRedisStore(addr string, lim Limit) (Contender, error) {
	return newStore(NameRedisStore, redisStore, 0, nil)(addr, lim)
}

func newRueidisStore(addr string, lim Limit) (Contender, error) {
	return newStore(NameRueidisStore, rueidisStore, 0, nil)(addr, lim)
}

func newRedisChain(breaker []policy.BreakerOption) func(string, Limit) (Contender, error) {
	return newStore(NameRedisChain, redisStore, len(ChainLayers), breaker)
}

func newRueidisChain(breaker []policy.BreakerOption) func(string, Limit) (Contender, error) {
	return newStore(NameRueidisChain, rueidisStore, len(ChainLayers), breaker)
}

// redisStore returns a redisstore on a go-redis client of addr with
// default options, keys under prefix, and what closes the client.
func redisStore(addr, prefix string) (sluice.Store, func(), error) {
	client := redis.NewClient(&redis.Options{Addr: addr})
	store, err := redisstore.New(client, redisstore.Config{Prefix: prefix})
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return store, func() { client.Close() }, nil
}

// rueidisStore returns a rueidisstore on a rueidis client of addr with
// default options (no client-side cache), keys under prefix, and what
// closes the client.
func rueidisStore(addr, prefix string) (sluice.Store, func(), error) {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		return nil, nil, err
	}
	store, err := rueidisstore.New(client, rueidisstore.Config{Prefix: prefix})
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return store, client.Close, nil
}

// ChainLayers names the layers of the production chain, from the store
// up, in the order they wrap it.
var ChainLayers = []string{"layered", "breaker", "policy", "telemetry"}

// newStore returns what starts a contender named name deciding over the
// store that open makes, under the first layers of [ChainLayers]: none
// for a bare store, all of them for the production chain, whose breaker
// breaker configures.
func newStore(name string, open func(addr, prefix string) (sluice.Store, func(), error), layers int, breaker []policy.BreakerOption) func(string, Limit) (Contender, error) {
	return func(addr string, lim Limit) (Contender, error) {
		store, closeClient, err := open(addr, name+":")
		if err != nil {
			return Contender{}, err
		}
		if layers == 0 {
			return sluiceContender(name, store, lim, closeClient, nil)
		}
		return chainContender(name, store, lim, closeClient, layers, breaker)
	}
}

// TracerProvider returns the tracer provider the chains' telemetry is
// given, as docs/telemetry.md recommends for a limiter: the SDK's,
// sampling 1% of the traces that start at a root span (a decision in a
// traced request follows its parent's sampling), with no exporter. The
// benchmarks' decisions are made outside any trace, so by the
// decorator's rule they start no span.
func TracerProvider() *sdktrace.TracerProvider {
	return sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.01))))
}

// chainContender decides, as sluiceContender does, with a sluice.Limiter,
// over the first layers of the production chain built on store:
// layered (zero Config), breaker (configured by breaker: the defaults
// unless a test says otherwise), policy (no options), telemetry
// ([TracerProvider], no-op meter provider). It counts the decisions the
// breaker's mode answered.
func chainContender(name string, store sluice.Store, lim Limit, closeClient func(), layers int, breaker []policy.BreakerOption) (Contender, error) {
	var (
		chain   sluice.Store = store
		circuit *policy.Breaker
		tp      *sdktrace.TracerProvider
	)
	wrap := func(f func(sluice.Store) (sluice.Store, error)) error {
		outer, err := f(chain)
		if err != nil {
			chain.Close()
			closeClient()
			return err
		}
		chain = outer
		return nil
	}
	for _, f := range []func(sluice.Store) (sluice.Store, error){
		func(s sluice.Store) (sluice.Store, error) { return layered.New(s, layered.Config{}) },
		func(s sluice.Store) (sluice.Store, error) {
			b, err := policy.NewBreaker(s, breaker...)
			circuit = b
			return b, err
		},
		func(s sluice.Store) (sluice.Store, error) { return policy.New(s) },
		func(s sluice.Store) (sluice.Store, error) {
			tp = TracerProvider()
			return telemetry.New(s,
				telemetry.WithTracerProvider(tp),
				telemetry.WithMeterProvider(metricnoop.NewMeterProvider()))
		},
	}[:layers] {
		if err := wrap(f); err != nil {
			return Contender{}, fmt.Errorf("%s: %w", name, err)
		}
	}
	var modeAnswers atomic.Int64
	c, err := sluiceContender(name, chain, lim, func() {
		closeClient()
		if tp != nil {
			tp.Shutdown(context.Background())
		}
	}, &modeAnswers)
	if err != nil {
		return Contender{}, err
	}
	if circuit != nil {
		c.ModeAnswers = modeAnswers.Load
		c.CircuitClosed = func() bool { return circuit.State() == policy.Closed }
	}
	return c, nil
}

func newMemStore(lim Limit) (Contender, error) {
	store, err := memstore.New(memstore.Config{MaxKeys: memoryBoundedKeys})
	if err != nil {
		return Contender{}, err
	}
	return sluiceContender(NameMemStore, store, lim, func() {}, nil)
}

// newRedisRate is go-redis/redis_rate: GCRA in one Lua script. Its keys
// get the prefix "rate:" from the library.
func newRedisRate(addr string, lim Limit) (Contender, error) {
	client := redis.NewClient(&redis.Options{Addr: addr})
	limiter := redis_rate.NewLimiter(client)
	limit := redis_rate.Limit{Rate: lim.Rate, Burst: lim.Burst, Period: time.Second}
	return Contender{
		Name: NameRedisRate,
		Allow: func(ctx context.Context, key string) (bool, error) {
			res, err := limiter.Allow(ctx, key, limit)
			if err != nil {
				return false, err
			}
			return res.Allowed > 0, nil
		},
		Close: func() { client.Close() },
	}, nil
}

// throttledQuota is lim in throttled's terms: its MaxBurst counts the
// requests beyond the first, so a capacity of Burst is MaxBurst Burst-1.
func throttledQuota(lim Limit) throttled.RateQuota {
	return throttled.RateQuota{MaxRate: throttled.PerSec(lim.Rate), MaxBurst: max(lim.Burst-1, 1)}
}

// newThrottled is throttled/throttled: GCRA decided in the client, its
// state swapped in with a compare-and-swap script, retried up to 10 times.
func newThrottled(addr string, lim Limit) (Contender, error) {
	client := redis.NewClient(&redis.Options{Addr: addr})
	store, err := throttledredis.NewCtx(client, NameThrottled+":")
	if err != nil {
		client.Close()
		return Contender{}, err
	}
	return throttledContender(NameThrottled, store, lim, func() { client.Close() })
}

func newThrottledMem(lim Limit) (Contender, error) {
	store, err := throttledmem.NewCtx(memoryBoundedKeys)
	if err != nil {
		return Contender{}, err
	}
	return throttledContender(NameThrottledMem, store, lim, func() {})
}

func throttledContender(name string, store throttled.GCRAStoreCtx, lim Limit, closeStore func()) (Contender, error) {
	limiter, err := throttled.NewGCRARateLimiterCtx(store, throttledQuota(lim))
	if err != nil {
		closeStore()
		return Contender{}, err
	}
	return Contender{
		Name: name,
		Allow: func(ctx context.Context, key string) (bool, error) {
			limited, _, err := limiter.RateLimitCtx(ctx, key, 1)
			return !limited && err == nil, err
		},
		Close: closeStore,
	}, nil
}

// newUlule is ulule/limiter: a fixed window of Rate per second (it has no
// burst), counted with INCRBY in a script.
func newUlule(addr string, lim Limit) (Contender, error) {
	client := redis.NewClient(&redis.Options{Addr: addr})
	store, err := ululeredis.NewStoreWithOptions(client, ulule.StoreOptions{Prefix: NameUlule})
	if err != nil {
		client.Close()
		return Contender{}, err
	}
	return ululeContender(NameUlule, store, lim, func() { client.Close() }), nil
}

func newUluleMem(lim Limit) (Contender, error) {
	store := ululemem.NewStoreWithOptions(ulule.StoreOptions{Prefix: NameUluleMem, CleanUpInterval: time.Minute})
	return ululeContender(NameUluleMem, store, lim, func() {}), nil
}

func ululeContender(name string, store ulule.Store, lim Limit, closeStore func()) Contender {
	limiter := ulule.New(store, ulule.Rate{Period: time.Second, Limit: int64(lim.Rate)})
	return Contender{
		Name: name,
		Allow: func(ctx context.Context, key string) (bool, error) {
			res, err := limiter.Get(ctx, key)
			return !res.Reached && err == nil, err
		},
		Close: closeStore,
	}
}

// newGoLimiter is sethvargo/go-limiter's memory store: Rate tokens per
// one-second interval (it has no separate burst).
func newGoLimiter(lim Limit) (Contender, error) {
	store, err := limiterstore.New(&limiterstore.Config{Tokens: uint64(lim.Rate), Interval: time.Second})
	if err != nil {
		return Contender{}, err
	}
	return Contender{
		Name: NameGoLimiter,
		Allow: func(ctx context.Context, key string) (bool, error) {
			_, _, _, ok, err := store.Take(ctx, key)
			return ok, err
		},
		Close: func() { store.Close(context.Background()) },
	}, nil
}

// newTimeRate is golang.org/x/time/rate, which limits one stream, keyed
// the way its users commonly key it: a sync.Map of limiters, one per key.
// Nothing ever removes a key, so its memory grows without bound.
func newTimeRate(lim Limit) (Contender, error) {
	var limiters sync.Map
	limit := rate.Limit(lim.Rate)
	return Contender{
		Name: NameTimeRate,
		Allow: func(_ context.Context, key string) (bool, error) {
			l, ok := limiters.Load(key)
			if !ok {
				l, _ = limiters.LoadOrStore(key, rate.NewLimiter(limit, lim.Burst))
			}
			return l.(*rate.Limiter).Allow(), nil
		},
		Close: func() { limiters.Clear() },
	}, nil
}

// refBucket is the reference token bucket, as it is commonly written for
// Redis: the tokens left and the instant of the last decision in a hash,
// refilled at rate per second up to burst.
const refBucket = `
local rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local h = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(h[1]) or burst
local at = tonumber(h[2]) or now
tokens = math.min(burst, tokens + (now - at) * rate / 1000000)
local ok = 0
if tokens >= 1 then
	tokens = tokens - 1
	ok = 1
end
redis.call('HSET', KEYS[1], 'tokens', tokens, 'at', now)
redis.call('PEXPIRE', KEYS[1], math.ceil(burst * 1000 / rate) + 1000)
return ok
`

// newRefScript runs refBucket with EVALSHA (go-redis's Script: EVAL on
// NOSCRIPT): one atomic call per decision.
func newRefScript(addr string, lim Limit) (Contender, error) {
	client := redis.NewClient(&redis.Options{Addr: addr})
	script := redis.NewScript(refBucket)
	args := []any{lim.Rate, lim.Burst}
	return Contender{
		Name: NameRefScript,
		Allow: func(ctx context.Context, key string) (bool, error) {
			n, err := script.Run(ctx, client, []string{NameRefScript + ":" + key}, args...).Int()
			return n == 1, err
		},
		Close: func() { client.Close() },
	}, nil
}

// refState is the reference bucket's state as the client-side versions
// read it: tokens left at the instant at (µs).
type refState struct {
	tokens float64
	at     int64
}

// refDecide is refBucket's arithmetic in Go, on the client's clock.
func refDecide(s refState, found bool, lim Limit, now int64) (refState, bool) {
	if !found {
		s = refState{tokens: float64(lim.Burst), at: now}
	}
	s.tokens = min(float64(lim.Burst), s.tokens+float64(max(now-s.at, 0))*float64(lim.Rate)/1e6)
	s.at = now
	if s.tokens < 1 {
		return s, false
	}
	s.tokens--
	return s, true
}

func readRef(vals []any) (refState, bool, error) {
	if len(vals) != 2 || vals[0] == nil || vals[1] == nil {
		return refState{}, false, nil
	}
	t, ok1 := vals[0].(string)
	a, ok2 := vals[1].(string)
	if !ok1 || !ok2 {
		return refState{}, false, fmt.Errorf("ref: unexpected reply %v", vals)
	}
	tokens, err := strconv.ParseFloat(t, 64)
	if err != nil {
		return refState{}, false, err
	}
	at, err := strconv.ParseInt(a, 10, 64)
	if err != nil {
		return refState{}, false, err
	}
	return refState{tokens, at}, true, nil
}

func writeRef(ctx context.Context, p redis.Pipeliner, key string, s refState, lim Limit) {
	p.HSet(ctx, key, "tokens", s.tokens, "at", s.at)
	p.PExpire(ctx, key, time.Duration(lim.Burst)*time.Second/time.Duration(lim.Rate)+time.Second)
}

// newRefClient decides in the client between a read and a write: HMGET,
// then HSET and PEXPIRE in one pipeline. Three commands, two round trips,
// and nothing stops two clients reading the same tokens.
func newRefClient(addr string, lim Limit) (Contender, error) {
	client := redis.NewClient(&redis.Options{Addr: addr})
	return Contender{
		Name: NameRefClient,
		Allow: func(ctx context.Context, key string) (bool, error) {
			key = NameRefClient + ":" + key
			vals, err := client.HMGet(ctx, key, "tokens", "at").Result()
			if err != nil {
				return false, err
			}
			s, found, err := readRef(vals)
			if err != nil {
				return false, err
			}
			s, ok := refDecide(s, found, lim, time.Now().UnixMicro())
			_, err = client.Pipelined(ctx, func(p redis.Pipeliner) error {
				writeRef(ctx, p, key, s, lim)
				return nil
			})
			return ok, err
		},
		Close: func() { client.Close() },
	}, nil
}

// errContended is returned when the WATCH/MULTI version loses its
// optimistic transaction refWatchTries times in a row.
var errContended = errors.New("ref-watch-multi: transaction aborted by contention on every try")

// refWatchTries bounds the WATCH/MULTI version's retries of one decision.
const refWatchTries = 100

// newRefWatch is the client-side decision made safe by an optimistic
// transaction: WATCH, HMGET, then MULTI, HSET, PEXPIRE, EXEC, retried
// from the start whenever another client wrote the key in between.
func newRefWatch(addr string, lim Limit) (Contender, error) {
	client := redis.NewClient(&redis.Options{Addr: addr})
	return Contender{
		Name: NameRefWatch,
		Allow: func(ctx context.Context, key string) (bool, error) {
			key = NameRefWatch + ":" + key
			var ok bool
			decide := func(tx *redis.Tx) error {
				vals, err := tx.HMGet(ctx, key, "tokens", "at").Result()
				if err != nil {
					return err
				}
				s, found, err := readRef(vals)
				if err != nil {
					return err
				}
				s, ok = refDecide(s, found, lim, time.Now().UnixMicro())
				_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
					writeRef(ctx, p, key, s, lim)
					return nil
				})
				return err
			}
			for range refWatchTries {
				err := client.Watch(ctx, decide, key)
				if !errors.Is(err, redis.TxFailedErr) {
					return ok, err
				}
			}
			return false, errContended
		},
		Close: func() { client.Close() },
	}, nil
}
