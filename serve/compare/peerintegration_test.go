package compare

import (
	"context"
	"crypto/x509"
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
	"sync"
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
// peer's module, read from the module cache) against sluice-serve: the
// same runtime directory (the peer's test/integration/runtime, copied),
// the same settings, given as the peer's environment variables and no
// flag (REDIS_TIMEOUT is the peer's default, 10s, rather than unset: see
// startSluiceEnv), and every assertion of testBasicBaseConfig,
// testConfigReload and testShareThreshold, in the same order, with the
// per-descriptor stats read from sluice's /metrics; a variant is run
// again if it spanned a minute's end (see inOneMinute). It counts the
// expectations that pass and those that differ by design, each under its
// reason, and fails on any other difference, and on a count that
// docs/serve.md ("Migrating from envoyproxy/ratelimit") does not show:
// SLUICE_UPDATE_DOCS=1 writes them there.
//
// The variants are the peer's TestBasicConfig, TestBasicAuthConfig,
// TestBasicTLSConfig, TestBasicAuthConfigWithRedisCluster,
// TestBasicAuthConfigWithRedisSentinel, TestBasicConfig_ExtraTags,
// TestBasicReloadConfig and TestShareThreshold (the memcached, xDS and
// gRPC TLS tests are not replayed: sluice-serve has none of them). The
// variants of each Redis server run in order, those of different servers
// side by side.
func TestPeerIntegration(t *testing.T) {
	if _, err := SluiceBinary(); err != nil {
		t.Skipf("sluice-serve does not build: %v", err)
	}
	root := peerModuleDir(t)
	src, err := os.ReadFile(filepath.Join(root, "test/integration/integration_test.go"))
	if err != nil {
		t.Fatalf("the peer's integration test: %v", err)
	}
	peerSource = string(src)
	plain := redistest.Start(t)
	// Servers that ask for a password, as the peer's TestBasicAuthConfig,
	// TestBasicTLSConfig and its Cluster and Sentinel tests do (set once
	// redistest has seen them start, and not emptied again).
	auth := redistest.Start(t)
	ca := redistest.NewCA(t, "peer-integration")
	tlsRedis := redistest.Start(t, redistest.WithTLS(ca))
	tlsClientRedis := redistest.Start(t, redistest.WithTLS(ca), redistest.WithClientAuth())
	cluster := redistest.StartCluster(t)
	sentinel := redistest.StartSentinel(t)
	for _, r := range append([]*redistest.Server{auth, tlsRedis, tlsClientRedis}, cluster.Servers()...) {
		requirePass(t, r)
	}
	// The replica authenticates to the primary, and the sentinels to
	// both, before the primary asks.
	if _, err := sentinel.Replica().Do("CONFIG", "SET", "masterauth", peerPassword); err != nil {
		t.Fatal(err)
	}
	for _, sn := range sentinel.Sentinels() {
		if _, err := sn.Do("SENTINEL", "SET", sentinel.MasterName(), "auth-pass", peerPassword); err != nil {
			t.Fatal(err)
		}
	}
	requirePass(t, sentinel.Primary())
	requirePass(t, sentinel.Replica())
	clientCert, clientKey := ca.CertificateFiles(t, t.TempDir(), "sluice", x509.ExtKeyUsageClientAuth)
	tl := &tally{t: t, design: map[string]int{}}

	type variant struct {
		test, name string
		env        map[string]string
		r          *redistest.Server // emptied first, unless nil
		// stop is the peer's StopCacheKeyIncrementWhenOverlimit, which the
		// expectations read.
		stop       bool
		localCache bool
	}
	redisEnv := func(addr string, extra ...string) map[string]string {
		env := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": addr, "BACKEND_TYPE": "redis"}
		for i := 0; i+1 < len(extra); i += 2 {
			env[extra[i]] = extra[i+1]
		}
		return env
	}
	perSecond := []string{"REDIS_PERSECOND", "true"}
	local := []string{"LOCAL_CACHE_SIZE_IN_BYTES", "1000"}
	stop := []string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"}
	pass := []string{"REDIS_AUTH", peerPassword}
	// The peer's tests trust their stunnel's certificate through the
	// system's roots; here the test's own CA signs the servers'.
	tlsEnv := []string{"REDIS_TLS", "true", "REDIS_TLS_CACERT", filepath.Join(tlsRedis.Dir(), "ca.crt")}
	clusterURL := strings.Join(cluster.Addrs(), ",")
	sentinelURL := sentinel.MasterName() + "," + strings.Join(sentinel.SentinelAddrs(), ",")
	with := func(lists ...[]string) []string { return slices.Concat(lists...) }
	variants := []variant{
		{test: "TestBasicConfig", name: "WithoutPerSecondRedis", env: redisEnv(plain.Addr()), r: plain},
		{test: "TestBasicConfig", name: "WithPerSecondRedis", env: redisEnv(plain.Addr(), perSecond...), r: plain},
		{test: "TestBasicConfig", name: "WithoutPerSecondRedisWithLocalCache", env: redisEnv(plain.Addr(), local...), r: plain, localCache: true},
		{test: "TestBasicConfig", name: "WithPerSecondRedisWithLocalCache", env: redisEnv(plain.Addr(), with(perSecond, local)...), r: plain, localCache: true},
		{test: "TestBasicConfig", name: "WithoutPerSecondRedisWithCachePrefix", env: redisEnv(plain.Addr(), "CACHE_KEY_PREFIX", "prefix:"), r: plain},
		{test: "TestBasicConfig", name: "WithoutPerSecondRedisWithstopCacheKeyIncrementWhenOverlimitConfig", env: redisEnv(plain.Addr(), stop...), r: plain, stop: true},
		{test: "TestBasicConfig", name: "WithPerSecondRedisWithstopCacheKeyIncrementWhenOverlimitConfig", env: redisEnv(plain.Addr(), with(perSecond, stop)...), r: plain, stop: true},
		{test: "TestBasicConfig", name: "WithoutPerSecondRedisWithLocalCacheAndstopCacheKeyIncrementWhenOverlimitConfig", env: redisEnv(plain.Addr(), with(local, stop)...), r: plain, stop: true, localCache: true},
		{test: "TestBasicConfig", name: "WithPerSecondRedisWithLocalCacheAndstopCacheKeyIncrementWhenOverlimitConfig", env: redisEnv(plain.Addr(), with(perSecond, local, stop)...), r: plain, stop: true, localCache: true},
		{test: "TestBasicAuthConfig", name: "WithoutPerSecondRedisAuth", env: redisEnv(auth.Addr(), pass...)},
		{test: "TestBasicAuthConfig", name: "WithPerSecondRedisAuth", env: redisEnv(auth.Addr(), with(pass, perSecond)...)},
		{test: "TestBasicAuthConfig", name: "WithoutPerSecondRedisAuthWithLocalCache", env: redisEnv(auth.Addr(), with(pass, local)...), localCache: true},
		{test: "TestBasicAuthConfig", name: "WithPerSecondRedisAuthWithLocalCache", env: redisEnv(auth.Addr(), with(pass, perSecond, local)...), localCache: true},
		{test: "TestBasicTLSConfig", name: "WithoutPerSecondRedisTLS", env: redisEnv(tlsRedis.TLSAddr(), with(pass, tlsEnv)...)},
		{test: "TestBasicTLSConfig", name: "WithPerSecondRedisTLS", env: redisEnv(tlsRedis.TLSAddr(), with(pass, tlsEnv, perSecond)...)},
		{test: "TestBasicTLSConfig", name: "WithoutPerSecondRedisTLSWithLocalCache", env: redisEnv(tlsRedis.TLSAddr(), with(pass, tlsEnv, local)...), localCache: true},
		{test: "TestBasicTLSConfig", name: "WithPerSecondRedisTLSWithLocalCache", env: redisEnv(tlsRedis.TLSAddr(), with(pass, tlsEnv, perSecond, local)...), localCache: true},
		{test: "TestBasicTLSConfig", name: "WithoutPerSecondRedisTLSWithClientCert", env: redisEnv(tlsClientRedis.TLSAddr(), with(pass, tlsEnv, []string{"REDIS_TLS_CLIENT_CERT", clientCert, "REDIS_TLS_CLIENT_KEY", clientKey})...)},
		{test: "TestBasicAuthConfigWithRedisCluster", name: "WithoutPerSecondRedisAuth", env: redisEnv(clusterURL, with(pass, []string{"REDIS_TYPE", "cluster"})...)},
		{test: "TestBasicAuthConfigWithRedisCluster", name: "WithPerSecondRedisAuth", env: redisEnv(clusterURL, with(pass, []string{"REDIS_TYPE", "cluster"}, perSecond)...)},
		{test: "TestBasicAuthConfigWithRedisCluster", name: "WithoutPerSecondRedisAuthWithLocalCache", env: redisEnv(clusterURL, with(pass, []string{"REDIS_TYPE", "cluster"}, local)...), localCache: true},
		{test: "TestBasicAuthConfigWithRedisCluster", name: "WithPerSecondRedisAuthWithLocalCache", env: redisEnv(clusterURL, with(pass, []string{"REDIS_TYPE", "cluster"}, perSecond, local)...), localCache: true},
		{test: "TestBasicAuthConfigWithRedisSentinel", name: "WithoutPerSecondRedisAuth", env: redisEnv(sentinelURL, with(pass, []string{"REDIS_TYPE", "sentinel"})...)},
		{test: "TestBasicAuthConfigWithRedisSentinel", name: "WithPerSecondRedisAuth", env: redisEnv(sentinelURL, with(pass, []string{"REDIS_TYPE", "sentinel"}, perSecond)...)},
		{test: "TestBasicAuthConfigWithRedisSentinel", name: "WithoutPerSecondRedisAuthWithLocalCache", env: redisEnv(sentinelURL, with(pass, []string{"REDIS_TYPE", "sentinel"}, local)...), localCache: true},
		{test: "TestBasicAuthConfigWithRedisSentinel", name: "WithPerSecondRedisAuthWithLocalCache", env: redisEnv(sentinelURL, with(pass, []string{"REDIS_TYPE", "sentinel"}, perSecond, local)...), localCache: true},
		{test: "TestBasicReloadConfig", name: "BasicWithoutWatchRoot", env: redisEnv(plain.Addr(), "RUNTIME_WATCH_ROOT", "false"), r: plain},
	}
	// The expectations of one variant of testBasicBaseConfig, without and
	// with a local cache, for the count of those not replayed.
	var perVariant [2]int
	var reloadN int
	variant1 := func(t *testing.T, v variant) {
		t.Run(v.test+"/"+v.name, func(t *testing.T) {
			n := inOneMinute(t, tl, func(tl *tally) {
				if v.r != nil {
					if _, err := v.r.Do("FLUSHALL"); err != nil {
						t.Fatal(err)
					}
				}
				s := startSluiceEnv(t, root, v.env)
				basicBaseConfig(tl, s, v.stop, v.localCache)
			})
			tl.mu.Lock()
			perVariant[b2i(v.localCache)] = n
			tl.mu.Unlock()
		})
	}
	// The variants of each Redis server run in the peer's order, one after
	// another; those of different servers side by side (they wait on
	// their servers and sluice-serve far more than they compute). The
	// plain server's group ends with the peer's tests that follow the
	// variants.
	serverNames := map[string]string{plain.Addr(): "plain", auth.Addr(): "auth", tlsRedis.TLSAddr(): "tls",
		tlsClientRedis.TLSAddr(): "tls-client-cert", clusterURL: "cluster", sentinelURL: "sentinel"}
	var groups [][]variant
	group := map[string]int{}
	for _, v := range variants {
		url := v.env["REDIS_URL"]
		i, ok := group[url]
		if !ok {
			i = len(groups)
			group[url] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], v)
	}
	t.Run("servers", func(t *testing.T) {
		for _, g := range groups {
			url := g[0].env["REDIS_URL"]
			t.Run(serverNames[url], func(t *testing.T) {
				t.Parallel()
				for _, v := range g {
					variant1(t, v)
				}
				if url != plain.Addr() {
					return
				}
				t.Run("TestBasicConfig_ExtraTags", func(t *testing.T) {
					tl := tl.sub(t)
					defer tl.commit()
					s := startSluiceEnv(t, root, redisEnv(plain.Addr(), "EXTRA_TAGS", "foo:bar,a:b"))
					extraTags(tl, s)
				})
				for _, watchRoot := range []string{"true", "false"} {
					t.Run("TestBasicReloadConfig/ReloadWatchRoot="+watchRoot, func(t *testing.T) {
						tl := tl.sub(t)
						defer tl.commit()
						s := startSluiceEnv(t, root, redisEnv(plain.Addr(), "RUNTIME_WATCH_ROOT", watchRoot))
						configReload(tl, s)
						reloadN = tl.count()
					})
				}
				t.Run("TestShareThreshold", func(t *testing.T) {
					inOneMinute(t, tl, func(tl *tally) {
						if _, err := plain.Do("FLUSHALL"); err != nil {
							t.Fatal(err)
						}
						s := startSluiceEnv(t, root, redisEnv(plain.Addr()))
						shareThreshold(tl, s)
					})
				})
			})
		}
	})
	if t.Failed() {
		return
	}
	block := migrationBlock(tl, perVariant, reloadN)
	t.Logf("the peer's integration expectations:\n%s", block)
	checkDoc(t, filepath.Join(moduleDir(), "..", "..", "docs", "serve.md"), "peer-integration", block)
}

// peerPassword is the password of the peer's Redis servers in its tests.
const peerPassword = "password123"

// requirePass has r ask new connections for peerPassword. redistest's own
// connection to it, opened before, stays authenticated.
func requirePass(t *testing.T, r *redistest.Server) {
	t.Helper()
	if _, err := r.Do("PING"); err != nil { // the connection, kept for later calls
		t.Fatal(err)
	}
	if _, err := r.Do("CONFIG", "SET", "requirepass", peerPassword); err != nil {
		t.Fatal(err)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// tally counts expectations.
type tally struct {
	t              *testing.T
	passed, failed int
	design         map[string]int // reason → count
	errs           []string       // a sub tally's failures, reported by commit
	root           *tally
	mu             sync.Mutex // a root's: its sub tallies commit side by side
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
	r.mu.Lock()
	defer r.mu.Unlock()
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
// during it, commits its tally and returns how many expectations it
// made: the peer's tests expect a key of 20 a minute to count 40 requests
// in one window (and one of 10 an hour, and shared thresholds an hour,
// whose ends are minutes' ends too), but do not wait for room in the
// window, so that a run that spans a minute's end fails them.
// inOneMinute starts f with at least minuteRoom left of the minute, and a
// run that took longer and spanned a minute's end is discarded and made
// again (at most twice; the third is committed whatever it spans). f
// starts a server of its own each time, whose stats are fresh; each stops
// when the subtest ends, after its client's connection has closed.
func inOneMinute(t *testing.T, root *tally, f func(tl *tally)) int {
	t.Helper()
	for try := 1; ; try++ {
		waitForRoom(minuteRoom)
		began := time.Now()
		tl := root.sub(t)
		f(tl)
		ended := time.Now()
		if began.Truncate(time.Minute).Equal(ended.Truncate(time.Minute)) || try == 3 {
			tl.commit()
			return tl.count()
		}
		t.Logf("run %d took %v, across a minute's end: discarded, and made again", try, ended.Sub(began).Round(time.Millisecond))
	}
}

// count returns how many expectations tl counted.
func (tl *tally) count() int {
	n := tl.passed + tl.failed
	for _, d := range tl.design {
		n += d
	}
	return n
}

// The reasons expectations differ by design.
const (
	noGauges    = "ratelimit.localcache.hitCount and missCount: freecache's gauges; sluice's -local-cache (a cache of denials by key, stores/layered) keeps none"
	atomicStack = "a denied request charges none of its descriptors (the atomic decision): the peer without STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT charges the allowed ones"
	cachedWhole = "-local-cache: a request one of whose keys is cached as over its limit is denied whole without asking Redis; the others' statuses say limit_remaining 0 and carry no duration_until_reset"
	noTags      = "EXTRA_TAGS: statsd's tags on every stat; sluice serves Prometheus series without them, and warns of the variable at start"
	firstLoad   = "config_load_success counts the load at start; sluice_limits_reloads_total counts reloads after it, and sluice_limits_rules shows the configuration in force"
)

// reasonRows are the migration guide's columns for each reason: what the
// peer does, what sluice-serve does, and why.
var reasonRows = map[string][3]string{
	noGauges:    {"the gauges `ratelimit.localcache.hitCount` and `missCount`", "none", "they are freecache's; sluice's `-local-cache` is a cache of denials by key (stores/layered), which keeps no such counts"},
	atomicStack: {"a request of two descriptors, one over its limit: the other is charged (its `limit_remaining` falls)", "the other is not charged: its `limit_remaining` is what the peer answers with `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true`", "the atomic decision: a denial charges nothing"},
	cachedWhole: {"with a local cache, a request with a key cached as over its limit: the other descriptor is asked and charged", "denied whole without a Redis call; the other descriptor's status says `limit_remaining` 0 and carries no `duration_until_reset` (what it has left is not known here)", "the atomic decision, and a cached denial costs no round trip"},
	noTags:      {"`EXTRA_TAGS`: the stat `total_hits` with the tags `foo:bar` and `a:b`", "`sluice_rls_descriptor_total_hits_total` without them, and a warning at start that `EXTRA_TAGS` is not honoured", "sluice serves Prometheus, not statsd"},
	firstLoad:   {"`config_load_success` 1 after the load at start", "`sluice_limits_reloads_total` counts reloads after the first load; `sluice_limits_rules` says a configuration is in force", "a reload is what an operator watches for"},
}

// extraTags is the peer's TestBasicConfig_ExtraTags: one request, then
// its total_hits and the count of configurations loaded, each carrying
// the tags.
func extraTags(tl *tally, s *peerServer) {
	t := tl.t
	tl.expect(true, "", "") // the connection (grpc.NewClient does not fail)
	_, err := s.client.ShouldRateLimit(context.Background(), newRequest("basic", [][][2]string{{{"key1", "foo"}}}, 1))
	tl.expect(err == nil, "", "basic key1: %v", err)
	n := s.counter(t, "basic.key1", "total_hits")
	warned := strings.Contains(s.srv.LogTail(), "EXTRA_TAGS")
	design := ""
	if n == 1 && warned {
		design = noTags
	}
	tl.expect(false, design, "basic key1: total_hits %d (want 1), EXTRA_TAGS warned: %v\n%s", n, warned, s.srv.LogTail())
	rules := s.gauge(t, "sluice_limits_rules")
	design = ""
	if rules > 0 {
		design = firstLoad
	}
	tl.expect(false, design, "sluice_limits_rules %d, want a configuration in force", rules)
}

// peerServer is sluice-serve started as the peer is in its tests, and a
// client.
type peerServer struct {
	srv     *Server
	client  rlsv3.RateLimitServiceClient
	runtime string // the runtime root: runtime/current
}

// startSluiceEnv copies the peer's integration runtime directory and
// runs sluice-serve with no flag, configured by the peer's settings
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
			return nil, environ(vars)
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
	return s.gauge(t, "sluice_limits_reloads_total")
}

// gauge returns the value of the unlabelled series name on /metrics.
func (s *peerServer) gauge(t *testing.T, name string) int {
	t.Helper()
	return series(t, s.srv, name)
}

// series returns the value of srv's unlabelled series name on /metrics.
func series(t *testing.T, srv *Server, name string) int {
	t.Helper()
	resp, err := http.Get("http://" + srv.HTTPAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\d+)$`).FindSubmatch(body)
	if m == nil {
		t.Fatalf("/metrics has no %s:\n%s", name, body)
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
