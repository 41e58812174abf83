package redisengine_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redisfaults"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/internal/redisengine"
)

// BenchmarkMultiScript measures what Redis spends on a decision of
// algorithms.MultiScript with nothing else running on it: one connection
// sends calls of 40 token-bucket decisions (a group each, as the stores
// merge concurrent callers) one after another, on one hot key or on
// distinct keys drawn from 10,000 users. It reports, per decision,
// script-µs (INFO commandstats' time within the script) and server-µs
// (Redis's CPU time, reading and writing the commands besides). A change
// to the scripts is measured by running this before and after,
// alternately.
//
// users-floor is what no script that decides on a key's state can save:
// the same calls on the same keys (state-sized values written with a
// TTL), to a script that only reads each key and writes 48 bytes (a
// state's length) in its place with SET ... KEEPTTL, as a decision that
// charges does.
// users less users-floor is what deciding costs in Lua.
//
// users-minimal sends the same calls to a script that makes, for each
// request, only what a charge of a token bucket on the server's clock
// must: it reads the request and the key's state, refills and charges
// the bucket, writes the new state with SET ... KEEPTTL and packs a reply
// of ten numbers. It checks nothing it reads, sets no TTL, and has no
// groups, other operations, other algorithms or repeated keys to
// handle. users less users-minimal is what MultiScript's generality and
// its checks cost a decision.
//
// users-decide sends them to users-minimal's script without its reply:
// what every script that decides exactly must do, whatever it replies.
//
//	go test -run '^$' -bench BenchmarkMultiScript -count 6 ./stores/internal/redisengine
func BenchmarkMultiScript(b *testing.B) {
	srv := redistest.Start(b)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer client.Close()
	ctx := context.Background()
	script, floor := algorithms.MultiScript(), algorithms.NewScript(floorScript)
	minimal, decide := algorithms.NewScript(minimalLua(true)), algorithms.NewScript(minimalLua(false))
	for _, s := range []*algorithms.Script{script, floor, minimal, decide} {
		if err := client.ScriptLoad(ctx, s.Source()).Err(); err != nil {
			b.Fatal(err)
		}
	}
	const (
		batch = 40
		users = 10_000
		calls = users / batch // distinct calls, each user once across them
	)
	limit := core.PerSecond(20_000).WithBurst(100)
	alg := redisengine.Alg(algorithms.MultiIndex(algorithms.TokenBucket))
	for _, workload := range []string{"hot", "users", "users-floor", "users-minimal", "users-decide"} {
		// The calls' keys and arguments, made before the timer starts.
		type call struct {
			keys []string
			args [3]string
		}
		made := make([]call, calls)
		for c := range made {
			var m redisengine.Merge
			keys := make([]string, batch)
			for i := range keys {
				key := "hot"
				if workload != "hot" {
					key = "user:" + strconv.Itoa((c*batch+i)*7919%users) // 7919 is prime to 10,000
				}
				req := core.Request{Key: key, Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: limit}}
				keys[i] = redisengine.Key("bench:", key, algorithms.TokenBucket.Name())
				m.Add(string(redisengine.AppendArgs(nil, &req)), alg)
			}
			packed, algs, groups := m.Args()
			made[c] = call{keys, [3]string{packed, algs, groups}}
		}
		b.Run(workload, func(b *testing.B) {
			sha := script.Hash()
			switch workload {
			case "users-floor":
				sha = floor.Hash()
				for _, c := range made { // the keys as sluice leaves them
					for _, k := range c.keys {
						client.Set(ctx, k, floorValue, time.Minute)
					}
				}
			case "users-minimal":
				sha = minimal.Hash()
			case "users-decide":
				sha = decide.Hash()
			}
			send := func(c call) {
				if err := client.EvalSha(ctx, sha, c.keys, c.args[0], c.args[1], c.args[2]).Err(); err != nil {
					b.Fatal(err)
				}
			}
			for _, c := range made { // every key written once: the steady state
				send(c)
			}
			if err := client.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			_, scriptBefore, cpuBefore := scriptStats(b, srv)
			n := 0
			for b.Loop() {
				send(made[n%calls])
				n++
			}
			b.StopTimer()
			got, script, cpu := scriptStats(b, srv)
			if got != float64(n) {
				b.Fatalf("INFO commandstats counts %.0f calls of EVALSHA, want %d", got, n)
			}
			decisions := float64(n * batch)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/decisions, "ns/decision")
			b.ReportMetric((script-scriptBefore)/decisions, "script-µs/decision")
			b.ReportMetric((cpu-cpuBefore)/decisions, "server-µs/decision")
		})
	}
}

// floorScript reads each of its keys and writes a state's worth of bytes
// (48, six packed numbers) in its place, keeping the key's TTL: the
// commands a merged call's decisions make on distinct keys that they
// charge, and nothing else. It replies with its first argument, as a
// merged call replies with one string.
const floorScript = `
local state = string.sub(ARGV[1], 1, 48)
for i = 1, #KEYS do
	redis.call('GET', KEYS[i])
	redis.call('SET', KEYS[i], state, 'KEEPTTL')
end
return ARGV[1]
`

// minimalLua returns users-minimal's script, or users-decide's without
// reply: it decides each of its requests, packed as MultiScript's ARGV[1]
// packs them, as a token bucket's charge on the server's clock, with none
// of MultiScript's checks and cases: the least a script of its calling
// convention can do for such requests on distinct keys. It writes states
// of the token bucket's layout, so that its keys hold what it reads from
// the first call on. With reply it packs ten numbers for each decision
// and replies with them all; without, it replies with an empty string.
func minimalLua(reply bool) string {
	pack, ret := "", "return ''"
	if reply {
		pack = "\tout[i] = packd('<dddddddddd', 1, burst, floor(level / u), 0, reset, 0, now, level, u, 0)\n"
		ret = "return table.concat(out)"
	}
	return `
local KEYS, ARGS = KEYS, ARGV[1]
local unpackd, packd, floor, ceil, min = struct.unpack, struct.pack, math.floor, math.ceil, math.min
local n = #KEYS
local size = #ARGS / n
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local got = redis.call('MGET', unpack(KEYS))
local out = {}
for i = 1, n do
	local _, cost, _, _, _, burst, u, r = unpackd('<dddddddddd', ARGS, size * (i - 1) + 1)
	local v = got[i]
	local T, A, B, C, E, X = 0, 0, 0, 0, 0, 0
	if v and #v == 48 then
		T, A, B, C, E, X = unpackd('<dddddd', v)
	end
	local capacity = burst * u
	local level = capacity
	if now < E then
		level = min(A + (now - T) * r, capacity)
	end
	level = level - cost * u
	local reset = ceil((capacity - level) / r)
	redis.call('SET', KEYS[i], packd('<dddddd', now, level, u, C, now + reset, X), 'KEEPTTL')
` + pack + `end
` + ret + "\n"
}

// floorValue is what users-floor's keys hold before it runs: a state's
// length.
var floorValue = strings.Repeat("s", 48)

// scriptStats reads srv's INFO: the calls of EVALSHA, the µs Redis spent
// within them, and its CPU time in µs.
func scriptStats(b *testing.B, srv *redistest.Server) (calls, script, cpu float64) {
	b.Helper()
	commands := redisfaults.Info(b, srv, "commandstats")
	calls = float64(redisfaults.InfoCount(commands, "cmdstat_evalsha", "calls"))
	script = float64(redisfaults.InfoCount(commands, "cmdstat_evalsha", "usec"))
	for line := range strings.Lines(redisfaults.Info(b, srv, "cpu")) {
		name, value, _ := strings.Cut(strings.TrimSpace(line), ":")
		if name == "used_cpu_sys" || name == "used_cpu_user" {
			f, err := strconv.ParseFloat(value, 64)
			if err != nil {
				b.Fatalf("INFO cpu: %s: %v", line, err)
			}
			cpu += f * 1e6
		}
	}
	return calls, script, cpu
}
