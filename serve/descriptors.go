package serve

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// DefaultMaxDescriptorStats is how many descriptors a [Service] keeps
// counts for unless [WithDescriptorStats] says otherwise.
const DefaultMaxDescriptorStats = 10_000

// OtherDescriptors is the name the counts of descriptors beyond the
// limit set by [WithDescriptorStats] are kept under, together.
const OtherDescriptors = "_other"

// DefaultNearLimitRatio is the share of a limit past which an admission
// is near the limit unless [WithNearLimitRatio] says otherwise:
// envoyproxy/ratelimit's NEAR_LIMIT_RATIO default.
const DefaultNearLimitRatio = 0.8

// DescriptorStats are the hits of requests for one descriptor, counted
// as envoyproxy/ratelimit counts its per-descriptor stats. A hit is a
// unit of a descriptor's cost (hits_addend). See docs/serve.md.
type DescriptorStats struct {
	// TotalHits counts every hit decided under a limit.
	TotalHits uint64
	// WithinLimit counts the hits the descriptor's own limit admitted,
	// even in a request another descriptor denied (which charged none).
	WithinLimit uint64
	// NearLimit counts the admitted hits past 80% of the limit.
	NearLimit uint64
	// OverLimit counts the hits the descriptor's limit denied, shadow
	// mode included.
	OverLimit uint64
	// OverLimitWithLocalCache counts the denied hits the local cache
	// answered (sluice-serve -local-cache), without asking Redis.
	OverLimitWithLocalCache uint64
	// ShadowMode counts the hits a limit in shadow_mode would have
	// denied.
	ShadowMode uint64
}

// descriptorCounts is one descriptor's DescriptorStats, counted.
type descriptorCounts struct {
	total, within, near, over, cache, shadow atomic.Uint64
}

func (c *descriptorCounts) load() DescriptorStats {
	return DescriptorStats{
		TotalHits: c.total.Load(), WithinLimit: c.within.Load(), NearLimit: c.near.Load(),
		OverLimit: c.over.Load(), OverLimitWithLocalCache: c.cache.Load(), ShadowMode: c.shadow.Load(),
	}
}

// descriptorStats keeps each descriptor's counts under its stats name
// ([limits.Match.Metric]), for at most max names: the names of
// detailed_metric and value_to_metric rules carry request values, which
// are unbounded, so the counts of names beyond max go to other.
type descriptorStats struct {
	names sync.Map // name → *descriptorCounts
	n     atomic.Int64
	max   int64
	ratio float32 // the near-limit ratio, a float32 as envoyproxy/ratelimit's
	other descriptorCounts
}

// of returns the counts of the descriptor named name; nil if the service
// keeps none.
func (ds *descriptorStats) of(name string) *descriptorCounts {
	if ds.max == 0 || name == "" {
		return nil
	}
	if c, ok := ds.names.Load(name); ok {
		return c.(*descriptorCounts)
	}
	if ds.n.Add(1) > ds.max {
		ds.n.Add(-1)
		return &ds.other
	}
	c, loaded := ds.names.LoadOrStore(name, new(descriptorCounts))
	if loaded {
		ds.n.Add(-1)
	}
	return c.(*descriptorCounts)
}

// hit counts hits decided without anything known of the limit: by a
// fail-open breaker, or not asked because another descriptor's denial was
// cached.
func (c *descriptorCounts) hit(hits int64) {
	if c != nil {
		c.total.Add(uint64(max(hits, 0)))
	}
}

// count records what a descriptor of hits got: d's admission, how much
// of its limit is left and where its answer came from.
func (c *descriptorCounts) count(hits int64, allowed, shadow, cached bool, limit, remaining int64, ratio float32) {
	if c == nil {
		return
	}
	h := uint64(max(hits, 0))
	c.total.Add(h)
	if !allowed {
		c.over.Add(h)
		if cached {
			c.cache.Add(h)
		}
		if shadow {
			c.shadow.Add(h)
		}
		return
	}
	c.within.Add(h)
	// The hits past the threshold, as if this one was charged: what the
	// limit had used before it is used−hits.
	used := limit - remaining
	// The threshold as envoyproxy/ratelimit computes it, in float32.
	if threshold := int64(math.Floor(float64(float32(limit) * ratio))); used > threshold {
		c.near.Add(uint64(min(hits, used-threshold)))
	}
}

// write writes the counts in Prometheus's text format, a family for each
// kind of count and a series for each descriptor, sorted by name.
func (ds *descriptorStats) write(w io.Writer) {
	if ds.max == 0 {
		return
	}
	type named struct {
		name string
		st   DescriptorStats
	}
	var all []named
	ds.names.Range(func(k, v any) bool {
		all = append(all, named{k.(string), v.(*descriptorCounts).load()})
		return true
	})
	slices.SortFunc(all, func(a, b named) int { return strings.Compare(a.name, b.name) })
	if other := ds.other.load(); other.TotalHits > 0 {
		all = append(all, named{OtherDescriptors, other})
	}
	families := []struct {
		name, help string
		get        func(DescriptorStats) uint64
	}{
		{"sluice_rls_descriptor_total_hits_total", "Hits decided under each descriptor's limit.", func(s DescriptorStats) uint64 { return s.TotalHits }},
		{"sluice_rls_descriptor_within_limit_total", "Hits each descriptor's limit admitted.", func(s DescriptorStats) uint64 { return s.WithinLimit }},
		{"sluice_rls_descriptor_near_limit_total", "Admitted hits past the near-limit ratio (NEAR_LIMIT_RATIO, 0.8 by default) of each descriptor's limit.", func(s DescriptorStats) uint64 { return s.NearLimit }},
		{"sluice_rls_descriptor_over_limit_total", "Hits each descriptor's limit denied, shadow mode included.", func(s DescriptorStats) uint64 { return s.OverLimit }},
		{"sluice_rls_descriptor_over_limit_with_local_cache_total", "Denied hits the local cache answered.", func(s DescriptorStats) uint64 { return s.OverLimitWithLocalCache }},
		{"sluice_rls_descriptor_shadow_mode_total", "Hits a limit in shadow mode would have denied.", func(s DescriptorStats) uint64 { return s.ShadowMode }},
	}
	for _, f := range families {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n", f.name, f.help, f.name)
		for _, n := range all {
			fmt.Fprintf(w, "%s{descriptor=\"%s\"} %d\n", f.name, labelEscaper.Replace(n.name), f.get(n.st))
		}
	}
}

// labelEscaper escapes a label value for Prometheus's text format.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
