package redisengine_test

import (
	"bufio"
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

// TestImportsRunDown checks, with go list, that the Redis plumbing stays
// beside its users and that miniredis stays a test dependency: no package
// of the module but the Redis stores imports the engine (Go's internal
// rule would also let the other stores); policy, telemetry and core
// import no Redis client; and no package's non-test build needs
// miniredis.
func TestImportsRunDown(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}|{{join .Imports \" \"}}|{{join .Deps \" \"}}", "github.com/sluicehq/sluice/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const mod = "github.com/sluicehq/sluice/"
	engine := mod + "stores/internal/redisengine"
	users := map[string]bool{mod + "stores/redisstore": true, mod + "stores/rueidisstore": true}
	s := bufio.NewScanner(bytes.NewReader(out))
	for s.Scan() {
		pkg, rest, _ := strings.Cut(s.Text(), "|")
		imports, deps, _ := strings.Cut(rest, "|")
		for _, imp := range strings.Fields(imports) {
			if imp == engine && !users[pkg] {
				t.Errorf("%s imports the Redis engine: only the Redis stores may", pkg)
			}
		}
		for _, dep := range strings.Fields(deps) {
			if strings.Contains(dep, "miniredis") || strings.Contains(dep, "gopher-lua") {
				t.Errorf("%s needs %s outside its tests", pkg, dep)
			}
			lower := pkg == mod+"core" || pkg == mod+"policy" || pkg == mod+"telemetry"
			if lower && (strings.HasPrefix(dep, "github.com/redis/") || dep == engine) {
				t.Errorf("%s depends on %s: classification lives in core, below the Redis stores", pkg, dep)
			}
		}
	}
}
