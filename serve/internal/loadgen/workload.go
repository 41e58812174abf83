package loadgen

import (
	"fmt"
	"strconv"
	"strings"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// Tenants is the number of distinct tenant values in a three-descriptor
// request of [Keyed]: few, so that their counters are hot keys.
const Tenants = 16

// Workload is a set of prebuilt requests, one per key, and the order in
// which workers send them. Its methods are safe for concurrent use.
type Workload struct {
	reqs []*rlsv3.RateLimitRequest
}

// Keyed returns the requests of a user-keyed workload in domain: keys
// users, named prefix+"u"+index, where prefix sets them apart from
// another run's (a fresh prefix is a fresh set of counters). With
// descriptors 1 each request is
//
//	[{user=U}]
//
// and with descriptors 3
//
//	[{user=U}] [{tenant=T}] [{user=U}, {path=/api}]
//
// where T is one of [Tenants] values, prefix+"t"+(index mod 16).
// [SampleConfig] is a matching configuration.
func Keyed(domain, prefix string, descriptors, keys int) (*Workload, error) {
	if domain == "" {
		return nil, fmt.Errorf("%w: empty domain", ErrConfig)
	}
	if descriptors != 1 && descriptors != 3 {
		return nil, fmt.Errorf("%w: %d descriptors, want 1 or 3", ErrConfig, descriptors)
	}
	if keys < 1 {
		return nil, fmt.Errorf("%w: %d keys, want at least 1", ErrConfig, keys)
	}
	entry := func(k, v string) *rlcommon.RateLimitDescriptor_Entry {
		return &rlcommon.RateLimitDescriptor_Entry{Key: k, Value: v}
	}
	desc := func(entries ...*rlcommon.RateLimitDescriptor_Entry) *rlcommon.RateLimitDescriptor {
		return &rlcommon.RateLimitDescriptor{Entries: entries}
	}
	w := &Workload{reqs: make([]*rlsv3.RateLimitRequest, keys)}
	for k := range keys {
		user := prefix + "u" + strconv.Itoa(k)
		req := &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlcommon.RateLimitDescriptor{desc(entry("user", user))}}
		if descriptors == 3 {
			tenant := prefix + "t" + strconv.Itoa(k%Tenants)
			req.Descriptors = append(req.Descriptors,
				desc(entry("tenant", tenant)),
				desc(entry("user", user), entry("path", "/api")))
		}
		w.reqs[k] = req
	}
	return w, nil
}

// Keys returns the number of keys.
func (w *Workload) Keys() int { return len(w.reqs) }

// Key returns the key that worker sends as its i-th request: a hash of
// (worker, i), so that every worker visits the keys in its own order
// and, over many requests, equally often.
func (w *Workload) Key(worker, i int) int {
	return int(mix(uint64(worker)<<32^uint64(uint32(i))) % uint64(len(w.reqs)))
}

// Request returns the request for key k, shared by every caller: it must
// not be modified.
func (w *Workload) Request(k int) *rlsv3.RateLimitRequest { return w.reqs[k] }

// Requests is the function for [Config.Requests]: worker's i-th request
// is Request(Key(worker, i)).
func (w *Workload) Requests(worker, i int) *rlsv3.RateLimitRequest {
	return w.reqs[w.Key(worker, i)]
}

// mix is SplitMix64's finaliser: a bijection of uint64 whose outputs look
// random, so consecutive inputs land on unrelated keys.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// SampleConfig returns a configuration in envoyproxy/ratelimit's YAML
// format that gives [Keyed]'s requests in domain a limit each: perUser
// requests per unit for {user}, twice that for {user, path}, and 1,000
// times that for a tenant. unit is "second", "minute", "hour" or "day".
// extra, if not empty, is added to every rate_limit block, such as
// "algorithm: token-bucket" for sluice-serve.
func SampleConfig(domain string, perUser uint32, unit, extra string) string {
	limit := func(indent string, n uint64) string {
		s := fmt.Sprintf("%srate_limit:\n%s  unit: %s\n%s  requests_per_unit: %d\n", indent, indent, unit, indent, n)
		if extra != "" {
			s += indent + "  " + strings.TrimSpace(extra) + "\n"
		}
		return s
	}
	var b strings.Builder
	fmt.Fprintf(&b, "domain: %s\ndescriptors:\n", domain)
	b.WriteString("  - key: user\n")
	b.WriteString(limit("    ", uint64(perUser)))
	b.WriteString("    descriptors:\n      - key: path\n")
	b.WriteString(limit("        ", 2*uint64(perUser)))
	b.WriteString("  - key: tenant\n")
	b.WriteString(limit("    ", 1000*uint64(perUser)))
	return b.String()
}
