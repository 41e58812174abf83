package compare

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	peerconfig "github.com/envoyproxy/ratelimit/src/config"
	peerlimiter "github.com/envoyproxy/ratelimit/src/limiter"
	peermockstats "github.com/envoyproxy/ratelimit/test/mocks/stats"
	gostats "github.com/lyft/gostats"
	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/serve/limits"
)

// The peer's configuration files, below its module's directory. Every file
// is good but the bad ones listed in peerBadConfigs.
var peerConfigDirs = []string{
	"test/config",
	"test/integration/runtime/current/ratelimit/config",
	"examples/ratelimit/config",
}

// peerBadConfigs are the files of test/config the peer rejects, each with
// the files it is loaded after (duplicate_domain.yaml is bad only after
// another file of its domain) and whether domains are merged.
var peerBadConfigs = map[string]struct {
	after []string
	merge bool
}{
	"bad_limit_unit.yaml":      {},
	"bad_yaml.yaml":            {},
	"duplicate_domain.yaml":    {after: []string{"basic_config.yaml"}},
	"duplicate_key.yaml":       {},
	"empty_domain.yaml":        {},
	"empty_key.yaml":           {},
	"misspelled_key.yaml":      {},
	"misspelled_key2.yaml":     {},
	"non_map_list.yaml":        {},
	"non_string_key.yaml":      {},
	"replaces_empty.yaml":      {},
	"replaces_self.yaml":       {},
	"unlimited_with_unit.yaml": {},
	// merge_domain_key1.yaml is good alone, but bad twice, merged.
	"merge_domain_key1.yaml (twice)": {after: []string{"merge_domain_key1.yaml"}, merge: true},
}

// peerModuleDir returns the directory of the peer's module, as the go
// command finds it for this module.
func peerModuleDir(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skipf("no go command: %v", err)
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/envoyproxy/ratelimit").Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			err = fmt.Errorf("%w: %s", err, exit.Stderr)
		}
		t.Fatalf("go list -m github.com/envoyproxy/ratelimit: %v", err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		t.Fatal("go list -m github.com/envoyproxy/ratelimit: no directory (is the module downloaded?)")
	}
	return dir
}

// peerFile reads the peer's file name in dir.
func peerFile(t *testing.T, dir, name string) limits.File {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return limits.File{Name: name, Data: data}
}

// peerLoad loads files with the peer's own loader, reporting its panic
// (how it rejects a configuration) as an error.
func peerLoad(opts limits.Options, files ...limits.File) (cfg peerconfig.RateLimitConfig, err error) {
	defer func() {
		if r := recover(); r != nil {
			cfg, err = nil, fmt.Errorf("%v", r)
		}
	}()
	var toLoad []peerconfig.RateLimitConfigToLoad
	for _, f := range files {
		toLoad = append(toLoad, peerconfig.RateLimitConfigToLoad{Name: f.Name, ConfigYaml: peerconfig.ConfigFileContentToYaml(f.Name, string(f.Data))})
	}
	stats := peermockstats.NewMockStatManager(gostats.NewStore(gostats.NewNullSink(), false))
	return peerconfig.NewRateLimitConfigImpl(toLoad, stats, opts.MergeDomains), nil
}

// problemLine is how every problem limits reports begins: a file and a
// line.
var problemLine = regexp.MustCompile(`^([^:]+):([1-9][0-9]*): `)

func TestPeerConfigs(t *testing.T) {
	root := peerModuleDir(t)
	for _, sub := range peerConfigDirs {
		dir := filepath.Join(root, sub)
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var good []limits.File
		for _, e := range entries {
			if e.IsDir() || !strings.HasSuffix(e.Name(), ".yaml") {
				continue
			}
			if _, bad := peerBadConfigs[e.Name()]; bad {
				continue
			}
			good = append(good, peerFile(t, dir, e.Name()))
		}
		if len(good) == 0 {
			t.Fatalf("%s holds no configuration", dir)
		}
		for _, f := range good {
			opts := limits.Options{}
			files := []limits.File{f}
			if strings.HasPrefix(f.Name, "merge_domain_key") {
				continue // loaded together below
			}
			checkPeerGood(t, sub, opts, files...)
		}
		if sub == "test/config" {
			checkPeerGood(t, sub, limits.Options{MergeDomains: true},
				peerFile(t, dir, "merge_domain_key1.yaml"), peerFile(t, dir, "merge_domain_key2.yaml"))
			continue
		}
		// The other directories are loaded as the peer loads them: whole.
		s, err := limits.Load(dir, limits.Options{})
		if err != nil {
			t.Errorf("limits.Load(%s): %v", sub, err)
		} else if s.Len() == 0 {
			t.Errorf("limits.Load(%s) holds no rules", sub)
		}
	}

	dir := filepath.Join(root, "test/config")
	for name, bad := range peerBadConfigs {
		var files []limits.File
		for _, a := range bad.after {
			files = append(files, peerFile(t, dir, a))
		}
		files = append(files, peerFile(t, dir, strings.TrimSuffix(name, " (twice)")))
		checkPeerBad(t, name, limits.Options{MergeDomains: bad.merge}, files...)
	}
	// What the peer accepts that sluice once refused: a key repeated (the
	// last wins) and the largest limits of each unit.
	checkPeerGood(t, "repeated keys", limits.Options{}, limits.File{Name: "repeated.yaml", Data: []byte(`
domain: d
descriptors:
  - key: k
    value: v
    value: w
    rate_limit:
      unit: second
      requests_per_unit: 1
      requests_per_unit: 2
`)})
	for _, unit := range []string{"second", "minute", "hour", "day", "week", "month", "year"} {
		checkPeerGood(t, "largest limits", limits.Options{}, limits.File{Name: unit + ".yaml", Data: []byte(`
domain: d
descriptors:
  - key: max
    rate_limit: {unit: ` + unit + `, requests_per_unit: 4294967295}
  - key: prime
    rate_limit: {unit: ` + unit + `, requests_per_unit: 4294967291}
  - key: m
    rate_limit: {unit: ` + unit + `, requests_per_unit: 1000001}
  - key: h
    rate_limit: {unit: ` + unit + `, requests_per_unit: 10000019}
`)})
	}
	// The peer tests share_threshold misuse with inline configurations.
	checkPeerBad(t, "share_threshold without a wildcard", limits.Options{}, limits.File{Name: "share.yaml", Data: []byte(`
domain: d
descriptors:
  - key: files
    value: files/a
    share_threshold: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
`)})
}

// checkPeerGood checks that files load with limits, as with the peer, and
// that every request built from them matches as the peer matches it.
func checkPeerGood(t *testing.T, what string, opts limits.Options, files ...limits.File) {
	t.Helper()
	names := fmt.Sprint(fileNames(files))
	peer, err := peerLoad(opts, files...)
	if err != nil {
		t.Errorf("%s %s: the peer rejects it: %v", what, names, err)
		return
	}
	s, err := limits.Parse(opts, files...)
	if err != nil {
		t.Errorf("%s %s: limits.Parse: %v", what, names, err)
		return
	}
	if s.Len() == 0 && names != "[duplicate_domain.yaml]" {
		t.Errorf("%s %s: limits.Parse holds no rules", what, names)
	}
	matched := 0
	for _, f := range files {
		for _, req := range peerRequests(t, f) {
			if p := comparePeerMatch(peer, s, req); p != "" {
				t.Errorf("%s %s: %s", what, names, p)
			} else if s.Match(req.domain, req.entries).Rule != nil {
				matched++
			}
		}
	}
	if s.Len() > 0 && matched == 0 {
		t.Errorf("%s %s: no request matched a rule", what, names)
	}
}

// checkPeerBad checks that the peer and limits both reject files, and that
// each problem limits reports names one of them and a line.
func checkPeerBad(t *testing.T, what string, opts limits.Options, files ...limits.File) {
	t.Helper()
	if _, err := peerLoad(opts, files...); err == nil {
		t.Errorf("%s: the peer accepts %s", what, fileNames(files))
	}
	_, err := limits.Parse(opts, files...)
	if err == nil {
		t.Errorf("%s: limits.Parse accepts %s", what, fileNames(files))
		return
	}
	if !errors.Is(err, limits.ErrInvalid) {
		t.Errorf("%s: limits.Parse: %v does not wrap ErrInvalid", what, err)
	}
	for _, p := range strings.Split(err.Error(), "\n") {
		m := problemLine.FindStringSubmatch(p)
		if m == nil || !slices.Contains(fileNames(files), m[1]) {
			t.Errorf("%s: problem %q does not name a file of %s and a line", what, p, fileNames(files))
		}
	}
}

// fileNames returns the names of files.
func fileNames(files []limits.File) []string {
	var names []string
	for _, f := range files {
		names = append(names, f.Name)
	}
	return names
}

// peerRequest is a request descriptor of a domain.
type peerRequest struct {
	domain  string
	entries []limits.Entry
}

// peerConfigTree is what a request is built from: a file's domain and
// the keys and values of its descriptors.
type peerConfigTree struct {
	Domain      string
	Descriptors []peerConfigNode
}

type peerConfigNode struct {
	Key, Value  string
	Descriptors []peerConfigNode
}

// peerRequests returns requests for every descriptor of f: each value it
// names, one it does not, a wildcard's prefix and more, none; each with
// an entry more and, at every level, one that matches nothing.
func peerRequests(t *testing.T, f limits.File) []peerRequest {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal(f.Data, &doc); err != nil {
		t.Fatalf("%s: %v", f.Name, err)
	}
	lastWins(&doc)
	var tree peerConfigTree
	if err := doc.Decode(&tree); err != nil {
		t.Fatalf("%s: %v", f.Name, err)
	}
	seen := map[string]bool{}
	var reqs []peerRequest
	add := func(entries []limits.Entry) {
		k := fmt.Sprint(entries)
		if !seen[k] {
			seen[k] = true
			reqs = append(reqs, peerRequest{tree.Domain, slices.Clone(entries)})
		}
	}
	var walk func(prefix []limits.Entry, nodes []peerConfigNode)
	walk = func(prefix []limits.Entry, nodes []peerConfigNode) {
		add(append(prefix, limits.Entry{Key: "unknown", Value: "u"}))
		for _, n := range nodes {
			values := []string{"", "other"}
			switch p, wild := strings.CutSuffix(n.Value, "*"); {
			case wild:
				values = append(values, p, p+"more", p[:max(len(p)-1, 0)])
			case n.Value != "":
				values = append(values, n.Value, n.Value+"x")
			}
			for _, v := range values {
				req := append(prefix[:len(prefix):len(prefix)], limits.Entry{Key: n.Key, Value: v})
				add(req)
				add(append(req, limits.Entry{Key: "extra", Value: "e"}))
				if len(req) < 6 {
					walk(req, n.Descriptors)
				}
			}
		}
	}
	walk(nil, tree.Descriptors)
	return reqs
}

// comparePeerMatch matches req with the peer's configuration and with s,
// and says how the results differ, if they do.
func comparePeerMatch(peer peerconfig.RateLimitConfig, s *limits.Set, req peerRequest) string {
	desc := &rlcommon.RateLimitDescriptor{}
	for _, e := range req.entries {
		desc.Entries = append(desc.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
	}
	want := peer.GetLimit(context.Background(), req.domain, desc)
	got := s.Match(req.domain, req.entries)
	where := fmt.Sprintf("Match(%q, %v)", req.domain, req.entries)
	switch {
	case want == nil && got.Rule == nil:
		return ""
	case want == nil:
		return fmt.Sprintf("%s = %s, the peer finds no limit", where, got.Rule.Path)
	case got.Rule == nil:
		return fmt.Sprintf("%s finds no rule, the peer finds %s", where, want.FullKey)
	}
	r := got.Rule
	var diffs []string
	diff := func(field string, got, want any) {
		if fmt.Sprint(got) != fmt.Sprint(want) {
			diffs = append(diffs, fmt.Sprintf("%s %v, the peer's %v", field, got, want))
		}
	}
	diff("metric", got.Metric, want.Stats.Key)
	diff("unit", r.Unit, want.Limit.Unit)
	diff("requests_per_unit", r.RequestsPerUnit, want.Limit.RequestsPerUnit)
	diff("unlimited", r.Unlimited, want.Unlimited)
	diff("deny", r.Deny, !want.Unlimited && want.Limit.RequestsPerUnit == 0)
	diff("shadow", r.Shadow, want.ShadowMode)
	diff("name", r.Name, want.Name)
	diff("replaces", strings.Join(r.Replaces, ","), strings.Join(want.Replaces, ","))
	diff("detailed_metric", r.DetailedMetric, want.DetailedMetric)
	if !want.Unlimited { // the peer has no cache key without a unit
		gen := peerlimiter.NewCacheKeyGenerator("")
		diff("key", peerStyleKey(got.Key), gen.GenerateCacheKey(req.domain, desc, want, 0).Key)
	}
	if len(diffs) == 0 {
		return ""
	}
	return where + ": " + strings.Join(diffs, "; ")
}

// peerStyleKey rewrites key, as limits.Key writes it, as the peer writes
// its cache key at instant 0: domain_key_value_…_0.
func peerStyleKey(key string) string {
	unescape := strings.NewReplacer("%25", "%", "%7C", "|", "%3D", "=", "%23", "#").Replace
	parts := strings.Split(key, "|")
	var b strings.Builder
	b.WriteString(unescape(parts[0]))
	b.WriteString("_")
	for _, p := range parts[1:] {
		k, v, _ := strings.Cut(p, "=")
		b.WriteString(unescape(k) + "_" + unescape(v) + "_")
	}
	b.WriteString("0")
	return b.String()
}

// lastWins drops every key of n's mappings that a later one repeats, as
// the peer's yaml.v2 reads them (yaml.v3 refuses them).
func lastWins(n *yaml.Node) {
	if n.Kind == yaml.MappingNode {
		last := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			last[n.Content[i].Value] = i
		}
		var kept []*yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if last[n.Content[i].Value] == i {
				kept = append(kept, n.Content[i], n.Content[i+1])
			}
		}
		n.Content = kept
	}
	for _, c := range n.Content {
		lastWins(c)
	}
}
