package compare

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/redistest"
)

// TestPeerIntegration replays the expectations of envoyproxy/ratelimit's
// own integration tests (test/integration/integration_test.go in the
// peer's module, read from the module cache) against sluice serve: the
// same runtime directory (the peer's test/integration/runtime, copied),
// the same settings, given as the peer's environment variables and no
// flag (REDIS_TIMEOUT is the peer's default, 10s, rather than unset: see
// startSluiceEnv), and every assertion of testBasicBaseConfig,
// testConfigReload and testShareThreshold, in the same order, with the
// per-descriptor stats read from sluice's /metrics; a variant is run
// again if it spanned a minute's end (see inOneMinute). It counts the expectations that pass and
// those that differ by design, each under its reason (docs/serve.md,
// "Migrating from envoyproxy/ratelimit", lists them with their counts),
// and fails on any other difference.
//
// The variants are the peer's TestBasicConfig, TestBasicAuthConfig,
// TestBasicReloadConfig and TestShareThreshold on one Redis (Redis
// Cluster, Sentinel, TLS, memcached and xDS variants are not replayed).
func TestPeerIntegration(t *testing.T) {
	if _, err := SluiceBinary(); err != nil {
		t.Skipf("sluice serve does not build: %v", err)
	}
	root := peerModuleDir(t)
	src := filepath.Join(root, "test/integration/integration_test.go")
	if _, err := os.Stat(src); err != nil {
		t.Fatalf("the peer's integration test: %v", err)
	}
	plain := redistest.Start(t)
	// A Redis that asks for a password, as the peer's TestBasicAuthConfig
	// (set once redistest has seen it start; it is not emptied again).
	auth := redistest.Start(t)
	if _, err := auth.Do("CONFIG", "SET", "requirepass", "password123"); err != nil {
		t.Fatal(err)
	}
	tl := &tally{t: t, design: map[string]int{}}

	type variant struct {
		name string
		env  map[string]string
		r    *redistest.Server
		// stop is the peer's StopCacheKeyIncrementWhenOverlimit, which the
		// expectations read.
		stop       bool
		localCache bool
	}
	redisEnv := func(r *redistest.Server, extra ...string) map[string]string {
		env := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": r.Addr(), "BACKEND_TYPE": "redis"}
		for i := 0; i+1 < len(extra); i += 2 {
			env[extra[i]] = extra[i+1]
		}
		return env
	}
	variants := []variant{
		// TestBasicConfig
		{name: "WithoutPerSecondRedis", env: redisEnv(plain), r: plain},
		{name: "WithPerSecondRedis", env: redisEnv(plain, "REDIS_PERSECOND", "true"), r: plain},
		{name: "WithoutPerSecondRedisWithLocalCache", env: redisEnv(plain, "LOCAL_CACHE_SIZE_IN_BYTES", "1000"), r: plain, localCache: true},
		{name: "WithPerSecondRedisWithLocalCache", env: redisEnv(plain, "REDIS_PERSECOND", "true", "LOCAL_CACHE_SIZE_IN_BYTES", "1000"), r: plain, localCache: true},
		{name: "WithoutPerSecondRedisWithCachePrefix", env: redisEnv(plain, "CACHE_KEY_PREFIX", "prefix:"), r: plain},
		{name: "WithoutPerSecondRedisWithstopCacheKeyIncrementWhenOverlimitConfig", env: redisEnv(plain, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"), r: plain, stop: true},
		{name: "WithPerSecondRedisWithstopCacheKeyIncrementWhenOverlimitConfig", env: redisEnv(plain, "REDIS_PERSECOND", "true", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"), r: plain, stop: true},
		{name: "WithoutPerSecondRedisWithLocalCacheAndstopCacheKeyIncrementWhenOverlimitConfig", env: redisEnv(plain, "LOCAL_CACHE_SIZE_IN_BYTES", "1000", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"), r: plain, stop: true, localCache: true},
		{name: "WithPerSecondRedisWithLocalCacheAndstopCacheKeyIncrementWhenOverlimitConfig", env: redisEnv(plain, "REDIS_PERSECOND", "true", "LOCAL_CACHE_SIZE_IN_BYTES", "1000", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"), r: plain, stop: true, localCache: true},
		// TestBasicAuthConfig
		{name: "WithoutPerSecondRedisAuth", env: redisEnv(auth, "REDIS_AUTH", "password123"), r: auth},
		{name: "WithoutPerSecondRedisAuthWithLocalCache", env: redisEnv(auth, "REDIS_AUTH", "password123", "LOCAL_CACHE_SIZE_IN_BYTES", "1000"), r: auth, localCache: true},
		// TestBasicReloadConfig's BasicWithoutWatchRoot
		{name: "BasicWithoutWatchRoot", env: redisEnv(plain, "RUNTIME_WATCH_ROOT", "false"), r: plain},
	}
	for _, v := range variants {
		t.Run("TestBasicConfig/"+v.name, func(t *testing.T) {
			inOneMinute(t, tl, func(tl *tally) {
				if v.r != auth {
					if _, err := v.r.Do("FLUSHALL"); err != nil {
						t.Fatal(err)
					}
				}
				s := startSluiceEnv(t, root, v.env)
				defer s.srv.Stop()
				basicBaseConfig(tl, s, v.stop, v.localCache)
			})
		})
	}
	for _, watchRoot := range []string{"true", "false"} {
		t.Run("TestBasicReloadConfig/ReloadWatchRoot="+watchRoot, func(t *testing.T) {
			tl := tl.sub(t)
			defer tl.commit()
			s := startSluiceEnv(t, root, redisEnv(plain, "RUNTIME_WATCH_ROOT", watchRoot))
			configReload(tl, s)
		})
	}
	t.Run("TestShareThreshold", func(t *testing.T) {
		inOneMinute(t, tl, func(tl *tally) {
			if _, err := plain.Do("FLUSHALL"); err != nil {
				t.Fatal(err)
			}
			s := startSluiceEnv(t, root, redisEnv(plain))
			defer s.srv.Stop()
			shareThreshold(tl, s)
		})
	})
	var reasons []string
	total := 0
	for r, n := range tl.design {
		reasons = append(reasons, fmt.Sprintf("%5d  %s", n, r))
		total += n
	}
	slices.Sort(reasons)
	t.Logf("the peer's integration expectations: %d passed, %d differ by design, %d failed\n%s",
		tl.passed, total, tl.failed, strings.Join(reasons, "\n"))
}

// tally counts expectations.
type tally struct {
	t              *testing.T
	passed, failed int
	design         map[string]int // reason → count
	errs           []string       // a sub tally's failures, reported by commit
	root           *tally
}

// sub returns a tally for subtest t whose counts and failures go to tl's
// root when committed.
func (tl *tally) sub(t *testing.T) *tally {
	root := tl
	if tl.root != nil {
		root = tl.root
	}
	return &tally{t: t, design: map[string]int{}, root: root}
}

// commit adds a sub tally's counts to its root's and reports its
// failures.
func (tl *tally) commit() {
	r := tl.root
	r.passed += tl.passed
	r.failed += tl.failed
	for reason, n := range tl.design {
		r.design[reason] += n
	}
	for _, e := range tl.errs {
		tl.t.Error(e)
	}
}

// expect counts one expectation: passed if ok; else a difference by
// design if design names its reason, else a failure, reported when tl is
// committed.
func (tl *tally) expect(ok bool, design string, format string, args ...any) {
	switch {
	case ok:
		tl.passed++
	case design != "":
		tl.design[design]++
	default:
		tl.failed++
		tl.errs = append(tl.errs, fmt.Sprintf(format, args...))
	}
}

// minuteRoom is what inOneMinute leaves of a minute before a run: a
// variant of testBasicBaseConfig takes about 2.5 s (2 of them asleep).
const minuteRoom = 15 * time.Second

// inOneMinute runs f, whose expectations hold only if no minute ends
// during it, and commits its tally: the peer's tests expect a key of 20 a
// minute to count 40 requests in one window (and one of 10 an hour, and
// shared thresholds an hour, whose ends are minutes' ends too), but do
// not wait for room in the window, so that a run that spans a minute's
// end fails them. inOneMinute starts f with at least minuteRoom left of
// the minute, and a run that took longer and spanned a minute's end is
// discarded and made again (at most twice; the third is committed
// whatever it spans). f starts a server of its own each time, whose stats
// are fresh.
func inOneMinute(t *testing.T, root *tally, f func(tl *tally)) {
	t.Helper()
	for try := 1; ; try++ {
		waitForRoom(minuteRoom)
		began := time.Now()
		tl := root.sub(t)
		f(tl)
		ended := time.Now()
		if began.Truncate(time.Minute).Equal(ended.Truncate(time.Minute)) || try == 3 {
			tl.commit()
			return
		}
		t.Logf("run %d took %v, across a minute's end: discarded, and made again", try, ended.Sub(began).Round(time.Millisecond))
	}
}

// The reasons expectations differ by design.
const (
	noGauges    = "ratelimit.localcache.hitCount and missCount: freecache's gauges; sluice's -local-cache (a cache of denials by key, stores/layered) keeps none"
	atomicStack = "a denied request charges none of its descriptors (the atomic decision): the peer without STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT charges the allowed ones"
	cachedWhole = "-local-cache: a request one of whose keys is cached as over its limit is denied whole without asking Redis; the others' statuses say limit_remaining 0 and carry no duration_until_reset"
)

// peerServer is sluice serve started as the peer is in its tests, and a
// client.
type peerServer struct {
	srv     *Server
	client  rlsv3.RateLimitServiceClient
	runtime string // the runtime root: runtime/current
}

// startSluiceEnv copies the peer's integration runtime directory and
// runs sluice serve with no flag, configured by the peer's settings
// (defaultSettings in its integration test) and env.
func startSluiceEnv(t *testing.T, peerRoot string, env map[string]string) *peerServer {
	t.Helper()
	bin, err := SluiceBinary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	runtime := filepath.Join(dir, "runtime/current")
	copyTree(t, filepath.Join(peerRoot, "test/integration/runtime/current"), runtime)
	s := start(t, launch{
		name:  SluiceName,
		bin:   bin,
		dir:   dir,
		ports: 3,
		args: func(ports []int) ([]string, []string) {
			vars := map[string]string{
				"RUNTIME_ROOT":         runtime,
				"RUNTIME_SUBDIRECTORY": "ratelimit",
				"RUNTIME_APPDIRECTORY": "config",
				"USE_STATSD":           "false",
				"HOST":                 "127.0.0.1",
				"PORT":                 strconv.Itoa(ports[2]),
				"GRPC_HOST":            "127.0.0.1",
				"GRPC_PORT":            strconv.Itoa(ports[0]),
				"DEBUG_HOST":           "127.0.0.1",
				"DEBUG_PORT":           strconv.Itoa(ports[1]),
				// The peer's default, which its tests run with. Unset,
				// sluice's deadline is 100 ms, past which the breaker
				// answers in its mode: on a loaded machine a Redis call
				// that waited longer for a core was answered fail-open
				// (OK, no current_limit) where the peer's test expects
				// the limit.
				"REDIS_TIMEOUT": "10s",
			}
			for k, v := range env {
				vars[k] = v
			}
			return []string{"serve"}, environ(vars)
		},
		addrs: func(ports []int) (string, string) { return loopback(ports[0]), loopback(ports[1]) },
		ready: func(ctx context.Context, s *Server) error {
			if err := httpOK(ctx, "http://"+s.HTTPAddr+"/healthz"); err != nil {
				return err
			}
			return tcpOpen(ctx, s.GRPCAddr)
		},
	})
	conn, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &peerServer{srv: s, client: rlsv3.NewRateLimitServiceClient(conn), runtime: runtime}
}

// copyTree copies the regular files below src to dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out := filepath.Join(dst, rel)
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return err
		}
		return os.WriteFile(out, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// newRequest is the peer's common.NewRateLimitRequest.
func newRequest(domain string, descriptors [][][2]string, hits uint32) *rlsv3.RateLimitRequest {
	r := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hits}
	for _, d := range descriptors {
		desc := &rlcommon.RateLimitDescriptor{}
		for _, e := range d {
			desc.Entries = append(desc.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: e[0], Value: e[1]})
		}
		r.Descriptors = append(r.Descriptors, desc)
	}
	return r
}

// newStatus is the peer's newDescriptorStatus: the duration's whole
// seconds, copied from the answer.
func newStatus(code rlsv3.RateLimitResponse_Code, perUnit uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit, remaining uint32, dur *durationpb.Duration) *rlsv3.RateLimitResponse_DescriptorStatus {
	return &rlsv3.RateLimitResponse_DescriptorStatus{
		Code:               code,
		CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: perUnit, Unit: unit},
		LimitRemaining:     remaining,
		DurationUntilReset: &durationpb.Duration{Seconds: dur.GetSeconds()},
	}
}

// counter reads the per-descriptor count named as the peer's stat
// "ratelimit.service.rate_limit.<descriptor>.<count>" from sluice's
// /metrics.
func (s *peerServer) counter(t *testing.T, descriptor, count string) int {
	t.Helper()
	resp, err := http.Get("http://" + s.srv.HTTPAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	re := regexp.MustCompile(`(?m)^sluice_rls_descriptor_` + count + `_total\{descriptor="` + regexp.QuoteMeta(descriptor) + `"\} (\d+)$`)
	m := re.FindSubmatch(body)
	if m == nil {
		return 0 // never counted
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

func localKey(key string, local bool) string {
	if local {
		return key + "_local"
	}
	return key
}

// basicBaseConfig is the peer's testBasicBaseConfig, assertion by
// assertion.
func basicBaseConfig(tl *tally, s *peerServer, stop, local bool) {
	t := tl.t
	ctx := context.Background()
	c := s.client
	equal := func(want, got *rlsv3.RateLimitResponse, design string, what string) {
		t.Helper()
		tl.expect(proto.Equal(want, got), design, "%s:\n got %v\nwant %v", what, got, want)
	}
	gauges := func() {
		// ratelimit.localcache.hitCount and .missCount
		tl.expect(false, noGauges, "")
		tl.expect(false, noGauges, "")
	}

	resp, err := c.ShouldRateLimit(ctx, newRequest("foo", [][][2]string{{{localKey("hello", local), "world"}}}, 1))
	equal(&rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: rlsv3.RateLimitResponse_OK}}}, resp, "", "unknown domain")
	tl.expect(err == nil, "", "unknown domain: %v", err)
	gauges()

	resp, err = c.ShouldRateLimit(ctx, newRequest("basic", [][][2]string{{{localKey("key1", local), "foo"}}}, 1))
	dur := resp.GetStatuses()[0].GetDurationUntilReset()
	equal(&rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
		newStatus(rlsv3.RateLimitResponse_OK, 50, rlsv3.RateLimitResponse_RateLimit_SECOND, 49, dur)}}, resp, "", "basic key1")
	tl.expect(err == nil, "", "basic key1: %v", err)
	n := s.counter(t, "basic."+localKey("key1", local), "total_hits")
	tl.expect(n == 1, "", "basic key1 total_hits %d, want 1", n)
	gauges()

	random := strconv.Itoa(rand.Int())
	key2, key3 := "another."+localKey("key2", local), "another."+localKey("key3", local)
	for i := range 25 {
		resp, err = c.ShouldRateLimit(ctx, newRequest("another", [][][2]string{{{localKey("key2", local), random}}}, 1))
		code := rlsv3.RateLimitResponse_OK
		remaining := uint32(20 - (i + 1))
		if i >= 20 {
			code, remaining = rlsv3.RateLimitResponse_OVER_LIMIT, 0
		}
		dur = resp.GetStatuses()[0].GetDurationUntilReset()
		equal(&rlsv3.RateLimitResponse{OverallCode: code, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
			newStatus(code, 20, rlsv3.RateLimitResponse_RateLimit_MINUTE, remaining, dur)}}, resp, "", fmt.Sprintf("key2 request %d", i))
		tl.expect(err == nil, "", "key2 request %d: %v", i, err)
		n = s.counter(t, key2, "total_hits")
		tl.expect(n == i+1, "", "key2 request %d: total_hits %d, want %d", i, n, i+1)
		want := 0
		if i >= 20 {
			want = i - 19
		}
		n = s.counter(t, key2, "over_limit")
		tl.expect(n == want, "", "key2 request %d: over_limit %d, want %d", i, n, want)
		want = 0
		if local && i >= 20 {
			want = i - 20
		}
		n = s.counter(t, key2, "over_limit_with_local_cache")
		tl.expect(n == want, "", "key2 request %d: over_limit_with_local_cache %d, want %d", i, n, want)
		gauges()
	}

	random = strconv.Itoa(rand.Int())
	for i := range 15 {
		resp, err = c.ShouldRateLimit(ctx, newRequest("another", [][][2]string{
			{{localKey("key2", local), random}},
			{{localKey("key3", local), random}},
		}, 1))
		code := rlsv3.RateLimitResponse_OK
		remaining1 := uint32(20 - (i + 1))
		remaining2 := uint32(10 - (i + 1))
		if i >= 10 {
			code = rlsv3.RateLimitResponse_OVER_LIMIT
			remaining2 = 0
			if stop {
				remaining1 = 10
			}
		}
		dur1 := resp.GetStatuses()[0].GetDurationUntilReset()
		dur2 := resp.GetStatuses()[1].GetDurationUntilReset()
		want := &rlsv3.RateLimitResponse{OverallCode: code, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
			newStatus(rlsv3.RateLimitResponse_OK, 20, rlsv3.RateLimitResponse_RateLimit_MINUTE, remaining1, dur1),
			newStatus(code, 10, rlsv3.RateLimitResponse_RateLimit_HOUR, remaining2, dur2)}}
		// Where sluice differs by design, its answer is checked to be
		// the one its design gives, else the difference is a failure.
		design := ""
		switch {
		case i >= 11 && local:
			// key3's denial is cached: the request is denied whole,
			// and key2, not asked, says nothing of what it has left.
			mine := proto.Clone(want).(*rlsv3.RateLimitResponse)
			mine.Statuses[0].LimitRemaining, mine.Statuses[0].DurationUntilReset = 0, nil
			if proto.Equal(mine, resp) {
				design = cachedWhole
			}
		case i >= 10 && !stop:
			// The peer with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT.
			mine := proto.Clone(want).(*rlsv3.RateLimitResponse)
			mine.Statuses[0].LimitRemaining = 10
			if proto.Equal(mine, resp) {
				design = atomicStack
			}
		}
		equal(want, resp, design, fmt.Sprintf("key2 and key3 request %d", i))
		tl.expect(err == nil, "", "key2 and key3 request %d: %v", i, err)

		n = s.counter(t, key2, "total_hits")
		tl.expect(n == i+26, "", "key2 and key3 request %d: key2 total_hits %d, want %d", i, n, i+26)
		n = s.counter(t, key2, "over_limit")
		tl.expect(n == 5, "", "key2 and key3 request %d: key2 over_limit %d, want 5", i, n)
		wantN := 0
		if local {
			wantN = 4
		}
		n = s.counter(t, key2, "over_limit_with_local_cache")
		tl.expect(n == wantN, "", "key2 and key3 request %d: key2 over_limit_with_local_cache %d, want %d", i, n, wantN)

		n = s.counter(t, key3, "total_hits")
		tl.expect(n == i+1, "", "key2 and key3 request %d: key3 total_hits %d, want %d", i, n, i+1)
		wantN = 0
		if i >= 10 {
			wantN = i - 9
		}
		n = s.counter(t, key3, "over_limit")
		tl.expect(n == wantN, "", "key2 and key3 request %d: key3 over_limit %d, want %d", i, n, wantN)
		wantN = 0
		if local && i >= 10 {
			wantN = i - 10
		}
		n = s.counter(t, key3, "over_limit_with_local_cache")
		tl.expect(n == wantN, "", "key2 and key3 request %d: key3 over_limit_with_local_cache %d, want %d", i, n, wantN)
		gauges()
	}

	// duration_until_reset ticks down: the same key, 2 seconds apart.
	resp1, _ := c.ShouldRateLimit(ctx, newRequest("another", [][][2]string{{{localKey("key4", local), "durTest"}}}, 1))
	time.Sleep(2 * time.Second)
	resp2, _ := c.ShouldRateLimit(ctx, newRequest("another", [][][2]string{{{localKey("key4", local), "durTest"}}}, 1))
	d1, d2 := resp1.GetStatuses()[0].GetDurationUntilReset().GetSeconds(), resp2.GetStatuses()[0].GetDurationUntilReset().GetSeconds()
	tl.expect(d2 < d1, "", "key4: duration_until_reset %ds then %ds, want it lower 2 s later", d1, d2)
}

// configReload is the peer's testConfigReload with its reloadNewConfigFile
// and restoreConfigFile: a file added to the configuration directory is
// in force once reloaded, and its removal reloads again. The peer counts
// reloads in ratelimit.service.config_load_success; sluice in
// sluice_limits_reloads_total.
func configReload(tl *tally, s *peerServer) {
	t := tl.t
	ctx := context.Background()
	resp, err := s.client.ShouldRateLimit(ctx, newRequest("reload", [][][2]string{{{"block", "foo"}}}, 1))
	tl.expect(proto.Equal(resp, &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: rlsv3.RateLimitResponse_OK}}}), "", "reload block before the reload: %v", resp)
	tl.expect(err == nil, "", "reload block: %v", err)

	before := s.reloads(t)
	data, err := os.ReadFile(filepath.Join(s.runtime, "ratelimit/reload.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	added := filepath.Join(s.runtime, "ratelimit/config/reload.yaml")
	if err := os.WriteFile(added, data, 0o644); err != nil {
		t.Fatal(err)
	}
	after, reloaded := s.waitReload(t, before)
	tl.expect(reloaded, "", "no reload within 120 s of adding reload.yaml")
	tl.expect(after > before, "", "reloads %d, then %d", before, after)

	resp, err = s.client.ShouldRateLimit(ctx, newRequest("reload", [][][2]string{{{"key1", "foo"}}}, 1))
	dur := resp.GetStatuses()[0].GetDurationUntilReset()
	tl.expect(proto.Equal(resp, &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
		newStatus(rlsv3.RateLimitResponse_OK, 50, rlsv3.RateLimitResponse_RateLimit_SECOND, 49, dur)}}), "", "reload key1 after the reload: %v", resp)
	tl.expect(err == nil, "", "reload key1: %v", err)

	if err := os.Remove(added); err != nil {
		t.Fatal(err)
	}
	before = after
	after, reloaded = s.waitReload(t, before)
	tl.expect(reloaded, "", "no reload within 120 s of removing reload.yaml")
	tl.expect(after > before, "", "reloads %d, then %d", before, after)
}

// reloads returns sluice_limits_reloads_total.
func (s *peerServer) reloads(t *testing.T) int {
	t.Helper()
	resp, err := http.Get("http://" + s.srv.HTTPAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^sluice_limits_reloads_total (\d+)$`).FindSubmatch(body)
	if m == nil {
		t.Fatalf("/metrics has no sluice_limits_reloads_total:\n%s", body)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// waitReload waits, as the peer's waitForConfigReload, up to 120 s for
// the reload count to pass before.
func (s *peerServer) waitReload(t *testing.T, before int) (int, bool) {
	t.Helper()
	for range 120 * 10 {
		if n := s.reloads(t); n > before {
			return n, true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return before, false
}

// shareThreshold is the peer's testShareThreshold.
func shareThreshold(tl *tally, s *peerServer) {
	ctx := context.Background()
	domain := "share-threshold-test"
	for i := range 10 {
		resp, err := s.client.ShouldRateLimit(ctx, newRequest(domain, [][][2]string{{{"files", "files/a.pdf"}}}, 1))
		tl.expect(err == nil, "", "files/a.pdf request %d: %v", i, err)
		tl.expect(resp.GetOverallCode() == rlsv3.RateLimitResponse_OK || resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT, "", "files/a.pdf request %d: %v", i, resp.GetOverallCode())
	}
	resp, err := s.client.ShouldRateLimit(ctx, newRequest(domain, [][][2]string{{{"files", "files/b.csv"}}}, 1))
	tl.expect(err == nil, "", "files/b.csv: %v", err)
	dur := resp.GetStatuses()[0].GetDurationUntilReset()
	tl.expect(proto.Equal(resp, &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
		newStatus(rlsv3.RateLimitResponse_OVER_LIMIT, 10, rlsv3.RateLimitResponse_RateLimit_HOUR, 0, dur)}}), "", "files/b.csv: %v", resp)
	base := time.Now().UnixNano()
	for i := range 10 {
		value := fmt.Sprintf("files_no_share/%d-%d", base, rand.Int64())
		resp, err := s.client.ShouldRateLimit(ctx, newRequest(domain, [][][2]string{{{"files_no_share", value}}}, 1))
		tl.expect(err == nil, "", "files_no_share request %d: %v", i, err)
		dur := resp.GetStatuses()[0].GetDurationUntilReset()
		tl.expect(proto.Equal(resp, &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
			newStatus(rlsv3.RateLimitResponse_OK, 10, rlsv3.RateLimitResponse_RateLimit_HOUR, 9, dur)}}), "", "files_no_share request %d: %v", i, resp)
	}
}
