package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Environment variables: sluice-serve reads envoyproxy/ratelimit's own
// (its src/settings/settings.go), under the peer's names, so that a
// Deployment written for the peer configures it unchanged. Each flag's
// default is the peer's default; a variable set in the environment
// replaces it; a flag on the command line replaces both. A variable
// sluice cannot honour is named in a warning at start, never ignored in
// silence; one whose honest answer is to refuse (CONFIG_TYPE=GRPC_XDS_SOTW,
// BACKEND_TYPE=memcache) stops it with an error.

// lookupFunc reads an environment variable, as os.LookupEnv.
type lookupFunc func(string) (string, bool)

// envSetting maps one of the peer's variables to a flag: value is
// applied to the flag as its default before the command line is parsed.
type envSetting struct {
	name string
	flag string
	// conv turns the variable's value into the flag's; nil: as it is.
	conv func(string) (string, error)
}

// envFlags are the peer's variables that set one flag each. Host and
// port pairs, the runtime directory and Redis are read apart.
var envFlags = []envSetting{
	{"REDIS_URL", "redis", nil},
	{"REDIS_SOCKET_TYPE", "redis-socket-type", lower},
	{"REDIS_TYPE", "redis-type", lower},
	{"REDIS_TLS", "redis-tls", boolean},
	{"REDIS_POOL_SIZE", "redis-pool-size", integer},
	{"REDIS_TIMEOUT", "timeout", duration},
	{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "store-health", boolean},
	{"BACKEND_TYPE", "backend", lower},
	{"CACHE_KEY_PREFIX", "prefix", nil},
	{"RUNTIME_IGNOREDOTFILES", "ignore-dotfiles", boolean},
	{"MERGE_DOMAIN_CONFIG", "merge-domains", boolean},
	{"LOG_LEVEL", "log-level", lower},
	{"LOG_FORMAT", "log-format", lower},
	{"NEAR_LIMIT_RATIO", "near-limit-ratio", float},
	{"LOCAL_CACHE_SIZE_IN_BYTES", "local-cache", cacheKeys},
	{"LIMIT_RESPONSE_HEADERS_ENABLED", "headers", boolean},
	{"LIMIT_LIMIT_HEADER", "limit-header", nil},
	{"LIMIT_REMAINING_HEADER", "remaining-header", nil},
	{"LIMIT_RESET_HEADER", "reset-header", nil},
	{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "healthy-with-config", boolean},
	{"SHADOW_MODE", "shadow-mode", boolean},
	{"GRPC_UDS", "grpc-uds", nil},
	{"GRPC_SERVER_USE_TLS", "grpc-tls", boolean},
	{"GRPC_SERVER_TLS_CERT", "grpc-tls-cert", nil},
	{"GRPC_SERVER_TLS_KEY", "grpc-tls-key", nil},
	{"GRPC_CLIENT_TLS_CACERT", "grpc-client-ca", nil},
	{"GRPC_CLIENT_TLS_SAN", "grpc-client-san", nil},
	{"GRPC_MAX_CONNECTION_AGE", "grpc-max-connection-age", duration},
	{"GRPC_MAX_CONNECTION_AGE_GRACE", "grpc-max-connection-age-grace", duration},
	{"PROMETHEUS_PATH", "metrics-path", nil},
	{"TRACING_SAMPLING_RATE", "trace-ratio", float},
}

// localCacheKeyBytes is what -local-cache holds per key, about: the
// peer's LOCAL_CACHE_SIZE_IN_BYTES is divided by it.
const localCacheKeyBytes = 512

// The peer's defaults where sluice's flags are built from several of its
// variables.
const (
	peerHost       = "0.0.0.0"
	peerPort       = "8080"
	peerGRPCPort   = "8081"
	peerDebugPort  = "6070"
	peerRuntime    = "/srv/runtime_data/current"
	peerAppDir     = "config"
	peerRedisURL   = "/var/run/nutcracker/ratelimit.sock"
	peerPromAddr   = ":9090"
	peerLogLevel   = "warn"
	peerMaxAge     = 24 * time.Hour
	peerMaxAgeWait = time.Hour
)

// unhonoured are the peer's variables sluice does not honour, each with
// the reason, and when its value matters: a warning names each that is
// set (to a value that asks for something, where bad says which).
var unhonoured = []struct {
	name   string
	prefix bool              // every variable whose name begins with name
	bad    func(string) bool // nil: any value
	why    string
}{
	{"FORCE_START_WITHOUT_INITIAL_CONFIG", false, isTrue, "it applies to xDS configuration, which sluice does not read"},
	{"CONFIG_GRPC_XDS_", true, nil, "sluice reads files only"},
	{"XDS_CLIENT_", true, nil, "sluice reads files only"},
	{"USE_STATSD", false, isTrue, "sluice serves Prometheus metrics (/metrics on -http-addr), not statsd"},
	{"STATSD_", true, nil, "sluice serves Prometheus metrics, not statsd"},
	{"USE_DOG_STATSD", false, isTrue, "sluice serves Prometheus metrics, not statsd"},
	{"USE_DOG_STATSD_MOGRIFIERS", false, nonEmpty, "sluice serves Prometheus metrics, not statsd"},
	{"EXTRA_TAGS", false, nonEmpty, "sluice's metrics carry no extra tags"},
	{"STATS_FLUSH_INTERVAL", false, nil, "Prometheus scrapes sluice's metrics; nothing is flushed"},
	{"PROMETHEUS_MAPPER_YAML", false, nonEmpty, "sluice names its own series (docs/serve.md)"},
	{"EXPIRATION_JITTER_MAX_SECONDS", false, nil, "sluice's keys expire with their window, without jitter"},
	{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false, isFalse, "sluice never charges a denied request, as this setting's true"},
	{"MEMCACHE_", true, nil, "sluice decides on Redis or in memory, not on memcached"},
	{"REDIS_PIPELINE_WINDOW", false, nil, "the rueidis client pipelines on its own; go-redis does not"},
	{"REDIS_PIPELINE_LIMIT", false, nil, "deprecated in the peer too"},
	{"REDIS_POOL_ON_EMPTY_BEHAVIOR", false, func(v string) bool { return !strings.EqualFold(v, "WAIT") }, "the peer refuses it too; every call is bounded by -timeout"},
	{"REDIS_PERSECOND", false, isTrue, "per-second limits are decided on the one Redis, with the others"},
	{"REDIS_PERSECOND_", true, nil, "per-second limits are decided on the one Redis, with the others"},
	{"QUOTA_MODE", false, isTrue, "sluice has no quota mode"},
	{"RESPONSE_DYNAMIC_METADATA", false, isTrue, "sluice sets no dynamic metadata"},
	{"TRACING_SERVICE_", true, nil, "sluice's spans name their service sluice-serve"},
}

// refused are the peer's settings that, set so, would make sluice-serve
// something other than what the deployment asks: it stops instead.
var refused = []struct {
	name string
	bad  func(string) bool
	why  string
}{
	{"CONFIG_TYPE", func(v string) bool { return !strings.EqualFold(v, "FILE") }, "sluice reads its configuration from files only (CONFIG_TYPE=FILE)"},
	{"BACKEND_TYPE", func(v string) bool { return strings.EqualFold(v, "memcache") }, "sluice decides on Redis (BACKEND_TYPE=redis) or in memory (memory), not on memcached"},
}

// environment is what applyEnv read: what the flags cannot say.
type environment struct {
	// redisAuth and sentinelAuth are REDIS_AUTH and REDIS_SENTINEL_AUTH:
	// a password, or "user:password".
	redisAuth, sentinelAuth string
	// tls holds REDIS_TLS_CLIENT_CERT, REDIS_TLS_CLIENT_KEY,
	// REDIS_TLS_CACERT and REDIS_TLS_SKIP_HOSTNAME_VERIFICATION.
	tlsCert, tlsKey, tlsCA string
	tlsSkipHostname        bool
	// warnings name the variables set that sluice does not honour.
	warnings []string
}

// applyEnv sets the defaults of fs's flags from the peer's variables
// that lookup finds. It returns an error naming the variable whose value
// is invalid or asks for what sluice refuses to pretend.
func applyEnv(fs *flag.FlagSet, lookup lookupFunc, environ []string) (*environment, error) {
	env := &environment{}
	get := func(name string) (string, bool) {
		v, ok := lookup(name)
		return v, ok
	}
	for _, r := range refused {
		if v, ok := get(r.name); ok && r.bad(v) {
			return nil, fmt.Errorf("%s=%s: %s", r.name, v, r.why)
		}
	}
	for _, s := range envFlags {
		v, ok := get(s.name)
		if !ok {
			continue
		}
		if s.conv != nil {
			c, err := s.conv(v)
			if err != nil {
				return nil, fmt.Errorf("%s=%q: %v", s.name, v, err)
			}
			v = c
		}
		if err := fs.Set(s.flag, v); err != nil {
			return nil, fmt.Errorf("%s=%q: %v", s.name, v, err)
		}
	}
	// Host and port pairs.
	for _, p := range []struct{ host, port, flag, defPort string }{
		{"HOST", "PORT", "api-addr", peerPort},
		{"GRPC_HOST", "GRPC_PORT", "grpc-addr", peerGRPCPort},
		{"DEBUG_HOST", "DEBUG_PORT", "http-addr", peerDebugPort},
	} {
		host, hok := get(p.host)
		port, pok := get(p.port)
		if !hok && !pok {
			continue
		}
		if !hok {
			host = peerHost
		}
		if !pok {
			port = p.defPort
		}
		if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			return nil, fmt.Errorf("%s=%q: want a port number", p.port, port)
		}
		if err := fs.Set(p.flag, net.JoinHostPort(host, port)); err != nil {
			return nil, err
		}
	}
	if v, ok := get("USE_PROMETHEUS"); ok {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("USE_PROMETHEUS=%q: want true or false", v)
		}
		if on {
			addr, ok := get("PROMETHEUS_ADDR")
			if !ok {
				addr = peerPromAddr
			}
			if err := fs.Set("metrics-addr", addr); err != nil {
				return nil, err
			}
		}
	}
	if v, ok := get("DISABLE_STATS"); ok {
		off, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("DISABLE_STATS=%q: want true or false", v)
		}
		if off {
			fs.Set("descriptor-stats", "0")
		}
	}
	if v, ok := get("TRACING_ENABLED"); ok {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("TRACING_ENABLED=%q: want true or false", v)
		}
		if on {
			proto, _ := get("TRACING_EXPORTER_PROTOCOL")
			endpoint, _ := get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
			if endpoint == "" {
				endpoint, _ = get("OTEL_EXPORTER_OTLP_ENDPOINT")
			}
			switch {
			case !strings.EqualFold(proto, "grpc"):
				env.warnings = append(env.warnings, fmt.Sprintf("TRACING_ENABLED with TRACING_EXPORTER_PROTOCOL=%q: sluice exports traces over OTLP/gRPC only; set TRACING_EXPORTER_PROTOCOL=grpc (no traces are sent)", proto))
			case endpoint == "":
				env.warnings = append(env.warnings, "TRACING_ENABLED without OTEL_EXPORTER_OTLP_ENDPOINT: sluice needs the collector's address (no traces are sent)")
			default:
				fs.Set("otlp-endpoint", endpoint)
			}
		}
	}
	env.redisAuth, _ = get("REDIS_AUTH")
	env.sentinelAuth, _ = get("REDIS_SENTINEL_AUTH")
	env.tlsCert, _ = get("REDIS_TLS_CLIENT_CERT")
	env.tlsKey, _ = get("REDIS_TLS_CLIENT_KEY")
	env.tlsCA, _ = get("REDIS_TLS_CACERT")
	if v, ok := get("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION=%q: want true or false", v)
		}
		env.tlsSkipHostname = b
	}
	// What sluice does not honour, in the order of the environment.
	for _, kv := range environ {
		name, v, _ := strings.Cut(kv, "=")
		for _, u := range unhonoured {
			match := name == u.name || u.prefix && strings.HasPrefix(name, u.name)
			if !match || u.bad != nil && !u.bad(v) {
				continue
			}
			env.warnings = append(env.warnings, fmt.Sprintf("%s: not honoured: %s", name, u.why))
			break
		}
	}
	return env, nil
}

// runtimeConfig is the configuration's path and options as the peer
// finds them from RUNTIME_ROOT, RUNTIME_SUBDIRECTORY,
// RUNTIME_APPDIRECTORY and RUNTIME_WATCH_ROOT: with RUNTIME_WATCH_ROOT
// (its default) the files of RUNTIME_ROOT/RUNTIME_SUBDIRECTORY whose path
// begins with RUNTIME_APPDIRECTORY and a dot, else every file of
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY.
func runtimeConfig(lookup lookupFunc) (path, appDir string, err error) {
	root, ok := lookup("RUNTIME_ROOT")
	if !ok {
		root = peerRuntime
	}
	sub, _ := lookup("RUNTIME_SUBDIRECTORY")
	app, ok := lookup("RUNTIME_APPDIRECTORY")
	if !ok {
		app = peerAppDir
	}
	watchRoot := true
	if v, ok := lookup("RUNTIME_WATCH_ROOT"); ok {
		if watchRoot, err = strconv.ParseBool(v); err != nil {
			return "", "", fmt.Errorf("RUNTIME_WATCH_ROOT=%q: want true or false", v)
		}
	}
	if !watchRoot {
		return filepath.Join(root, sub, app), "", nil
	}
	if sub == "" || root == "" || app == "" {
		// goruntime's loader loads nothing then, and the peer serves no
		// limit at all: a deployment never means that.
		return "", "", errors.New("RUNTIME_WATCH_ROOT (the default) with an empty RUNTIME_ROOT, RUNTIME_SUBDIRECTORY or RUNTIME_APPDIRECTORY: envoyproxy/ratelimit would load no configuration; set RUNTIME_SUBDIRECTORY, or -config")
	}
	return filepath.Join(root, sub), app, nil
}

// redisTLS is the TLS configuration of the Redis connections, as the peer
// makes it (utils.TlsConfigFromFiles): a client certificate if given, the
// system's roots and REDIS_TLS_CACERT's, and with
// REDIS_TLS_SKIP_HOSTNAME_VERIFICATION the chain verified without the
// name.
func (env *environment) redisTLS() (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if env.tlsCert != "" || env.tlsKey != "" {
		pair, err := tls.LoadX509KeyPair(env.tlsCert, env.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("REDIS_TLS_CLIENT_CERT, REDIS_TLS_CLIENT_KEY: %w", err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	if env.tlsCA != "" {
		pool, _ := x509.SystemCertPool()
		if pool == nil {
			pool = x509.NewCertPool()
		}
		pem, err := os.ReadFile(env.tlsCA)
		if err != nil {
			return nil, fmt.Errorf("REDIS_TLS_CACERT: %w", err)
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("REDIS_TLS_CACERT %s: no PEM certificate", env.tlsCA)
		}
		c.RootCAs = pool
	}
	if env.tlsSkipHostname {
		roots := c.RootCAs
		c.InsecureSkipVerify = true // the chain is verified below, without the name
		c.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 {
				return errors.New("tls: the server sent no certificate")
			}
			certs := make([]*x509.Certificate, len(raw))
			for i, der := range raw {
				cert, err := x509.ParseCertificate(der)
				if err != nil {
					return fmt.Errorf("tls: the server's certificate: %w", err)
				}
				certs[i] = cert
			}
			opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
			for _, cert := range certs[1:] {
				opts.Intermediates.AddCert(cert)
			}
			_, err := certs[0].Verify(opts)
			return err
		}
	}
	return c, nil
}

// splitAuth splits REDIS_AUTH as the peer does: "user:password", or a
// password alone.
func splitAuth(auth string) (user, pass string) {
	if u, p, ok := strings.Cut(auth, ":"); ok {
		return u, p
	}
	return "", auth
}

func lower(v string) (string, error) { return strings.ToLower(v), nil }

func boolean(v string) (string, error) {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return "", errors.New("want true or false")
	}
	return strconv.FormatBool(b), nil
}

func integer(v string) (string, error) {
	if _, err := strconv.Atoi(v); err != nil {
		return "", errors.New("want a whole number")
	}
	return v, nil
}

func float(v string) (string, error) {
	if _, err := strconv.ParseFloat(v, 32); err != nil {
		return "", errors.New("want a number")
	}
	return v, nil
}

func duration(v string) (string, error) {
	if _, err := time.ParseDuration(v); err != nil {
		return "", errors.New("want a duration, such as 100ms or 10s")
	}
	return v, nil
}

// cacheKeys turns LOCAL_CACHE_SIZE_IN_BYTES into a number of keys.
func cacheKeys(v string) (string, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return "", errors.New("want a size in bytes")
	}
	keys := n / localCacheKeyBytes
	if n > 0 {
		keys = max(keys, 1)
	}
	return strconv.Itoa(keys), nil
}

func nonEmpty(v string) bool { return v != "" }

func isTrue(v string) bool {
	b, err := strconv.ParseBool(v)
	return err == nil && b
}

func isFalse(v string) bool {
	b, err := strconv.ParseBool(v)
	return err == nil && !b
}
