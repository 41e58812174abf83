package compare

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// migrationBlock is docs/serve.md's account of TestPeerIntegration's
// counts: the expectations that passed and those that differ by design,
// by reason, and those of the peer's tests that are not replayed, by
// why. perVariant is one replayed variant of testBasicBaseConfig's count
// of expectations, without and with a local cache; reload is
// testConfigReload's. The peer's variants that are not replayed run the
// same functions, so their expectations are counted from these.
func migrationBlock(tl *tally, perVariant [2]int, reload int) string {
	var b strings.Builder
	design := 0
	for _, n := range tl.design {
		design += n
	}
	fmt.Fprintf(&b, "Of %d expectations, %d pass and %d differ by design, each checked to be the design's answer, none otherwise:\n\n",
		tl.passed+design+tl.failed, tl.passed, design)
	b.WriteString("| expectations | envoyproxy/ratelimit | sluice-serve | why |\n|---|---|---|---|\n")
	reasons := make([]string, 0, len(tl.design))
	for r := range tl.design {
		reasons = append(reasons, r)
	}
	slices.SortFunc(reasons, func(a, b string) int {
		if c := tl.design[b] - tl.design[a]; c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	for _, r := range reasons {
		row, ok := reasonRows[r]
		if !ok {
			row = [3]string{"", "", r}
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %s |\n", tl.design[r], row[0], row[1], row[2])
	}
	without, with := perVariant[0], perVariant[1]
	notReplayed := []struct {
		n          int
		tests, why string
	}{
		{5*without + with, "memcached: `TestBasicConfigMemcache` (3 variants, one with a local cache), `TestConfigMemcacheWithMaxIdleConns` (2), `TestMultiNodeMemcache` (1), each `testBasicBaseConfig`", "no memcached store: `BACKEND_TYPE=memcache` stops `sluice-serve`"},
		{2*without + 2*with + reload, "xDS: `TestXdsProviderBasicConfig` (4 variants of `testBasicBaseConfig`, two with a local cache), `TestXdsProviderBasicConfigReload` (`testConfigReload`)", "no configuration by xDS: `CONFIG_TYPE` other than `FILE` stops `sluice-serve`"},
		{peerAssertions("Test_mTLS") + peerAssertions("TestReloadGRPCServerCerts"), "TLS on the gRPC port: `Test_mTLS`, `TestReloadGRPCServerCerts` (their assertions)", "checked apart, by `TestServeTLS` (serve/cmd/sluice-serve): a client certificate of the client CA naming `GRPC_CLIENT_TLS_SAN` is admitted and others refused, and a certificate renamed over the old one is served to the next connections"},
	}
	total := 0
	for _, r := range notReplayed {
		total += r.n
	}
	fmt.Fprintf(&b, "\nNot replayed, %d expectations: of features `sluice-serve` does not have, and of TLS on the gRPC port, which their tests set up in the peer's process:\n\n", total)
	b.WriteString("| expectations | the peer's tests | why |\n|---|---|---|\n")
	for _, r := range notReplayed {
		fmt.Fprintf(&b, "| %d | %s | %s |\n", r.n, r.tests, r.why)
	}
	return b.String()
}

// peerSource is the peer's integration test's source, set by
// TestPeerIntegration for peerAssertions.
var peerSource string

// peerAssertions counts the testify assertions (assert.NoError(...) and
// the like, not assert.New) in the peer's integration test function name.
func peerAssertions(name string) int {
	i := strings.Index(peerSource, "\nfunc "+name+"(")
	if i < 0 {
		return 0
	}
	body := peerSource[i+1:]
	if j := strings.Index(body, "\nfunc "); j >= 0 {
		body = body[:j]
	}
	n := 0
	for _, m := range regexp.MustCompile(`\bassert\.([A-Z]\w*)\(`).FindAllStringSubmatch(body, -1) {
		if m[1] != "New" {
			n++
		}
	}
	return n
}

// checkDoc compares the block of path between the markers
// "<!-- name:begin ... -->" and "<!-- name:end -->" with want: with
// SLUICE_UPDATE_DOCS=1 it rewrites the block, and otherwise a block that
// differs fails the test, so that the page cannot say what the test did
// not measure.
func checkDoc(t *testing.T, path, name, want string) {
	t.Helper()
	rewrote, err := syncBlock(path, name, want, os.Getenv("SLUICE_UPDATE_DOCS") == "1")
	switch {
	case err != nil:
		t.Error(err)
	case rewrote:
		t.Logf("rewrote the %s block of %s", name, path)
	}
}

// errStaleBlock is syncBlock's error for a block that says other than
// what was measured.
var errStaleBlock = errors.New("the block disagrees with what this run measured (SLUICE_UPDATE_DOCS=1 rewrites it)")

// syncBlock compares path's block name with want, and rewrites it if
// update; a block that differs is otherwise an error wrapping
// errStaleBlock, which quotes both.
func syncBlock(path, name, want string, update bool) (rewrote bool, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	doc := string(data)
	begin, end := "<!-- "+name+":begin", "<!-- "+name+":end -->"
	i := strings.Index(doc, begin)
	j := strings.Index(doc, end)
	if i < 0 || j < i {
		return false, fmt.Errorf("%s has no %s ... %s block", path, begin, end)
	}
	k := strings.Index(doc[i:j], "-->\n")
	if k < 0 {
		return false, fmt.Errorf("%s: %s ... is not closed on its line", path, begin)
	}
	i += k + len("-->\n")
	switch {
	case doc[i:j] == want:
		return false, nil
	case update:
		return true, os.WriteFile(path, []byte(doc[:i]+want+doc[j:]), 0o644)
	}
	return false, fmt.Errorf("%s, %s: %w; it says\n%s\nand this run measured\n%s", path, name, errStaleBlock, doc[i:j], want)
}

// TestSyncBlock checks that a block that disagrees fails, unless asked to
// be rewritten, and that a rewritten one agrees.
func TestSyncBlock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "page.md")
	page := "intro\n<!-- counts:begin: written by a test -->\nOf 10, 7 pass.\n<!-- counts:end -->\nafter\n"
	if err := os.WriteFile(path, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	if rewrote, err := syncBlock(path, "counts", "Of 10, 7 pass.\n", false); rewrote || err != nil {
		t.Errorf("the same block: rewrote %v, %v; want nothing to do", rewrote, err)
	}
	if _, err := syncBlock(path, "counts", "Of 11, 8 pass.\n", false); !errors.Is(err, errStaleBlock) {
		t.Errorf("another count: %v, want errStaleBlock", err)
	}
	if rewrote, err := syncBlock(path, "counts", "Of 11, 8 pass.\n", true); !rewrote || err != nil {
		t.Errorf("another count, to be rewritten: rewrote %v, %v", rewrote, err)
	}
	data, _ := os.ReadFile(path)
	if want := strings.Replace(page, "Of 10, 7", "Of 11, 8", 1); string(data) != want {
		t.Errorf("rewritten:\n%s\nwant\n%s", data, want)
	}
	if _, err := syncBlock(path, "missing", "", false); err == nil || errors.Is(err, errStaleBlock) {
		t.Errorf("no such block: %v, want an error naming it", err)
	}
}
