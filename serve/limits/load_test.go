package limits

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// write writes files, named by their paths below dir, dedented.
func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(dedent(data)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLoadDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, dir, map[string]string{
		"api.yaml":             "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
		"sub/web.yml":          "domain: web\n",
		"sub/deeper/db.yaml":   "domain: db\n",
		"c.conf":               "domain: c\n",
		"d":                    "domain: d\n",
		"f.YAML":               "domain: f\n",
		".hidden.yaml":         "domain: hidden\n",
		".git/g":               "domain: git\n",
		"..2026_11_28/x.yaml":  "domain: x\n",
		"elsewhere/dir/y.yaml": "domain: y\n",
	})
	// A Kubernetes ConfigMap volume links each file into ..data, itself a
	// link to a directory, which is not followed.
	if err := os.Symlink(filepath.Join(dir, "..2026_11_28"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "..data/x.yaml"), filepath.Join(dir, "x.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "elsewhere/dir"), filepath.Join(dir, "dirlink.yaml")); err != nil {
		t.Fatal(err)
	}

	// As the service: every file, dot files too; the ConfigMap's files
	// twice, which only merging domains allows.
	_, err := Load(dir, Options{})
	if got, want := problems(err), []string{filepath.Join(dir, "x.yaml") + `:1: domain "x" is declared twice (first at ` + filepath.Join(dir, "..2026_11_28/x.yaml") + `:1); one file per domain, unless merging domains`}; !slices.Equal(got, want) {
		t.Errorf("Load(dir) problems %q, want %q", got, want)
	}
	s, err := Load(dir, Options{MergeDomains: false, IgnoreDotFiles: true})
	if err != nil {
		t.Fatalf("Load(IgnoreDotFiles): %v", err)
	}
	if got, want := s.Domains(), []string{"api", "c", "d", "db", "f", "web", "x", "y"}; !slices.Equal(got, want) {
		t.Errorf("Load(dir, IgnoreDotFiles).Domains() = %q, want %q", got, want)
	}
	if got, want := warnings(s), []string{filepath.Join(dir, "dirlink.yaml") + ": not read: a link to a directory, which the rate limit service does not follow either"}; !slices.Equal(got, want) {
		t.Errorf("Load(dir, IgnoreDotFiles).Warnings() = %q, want %q", got, want)
	}
	s, err = Load(dir, Options{MergeDomains: true})
	if err != nil {
		t.Fatalf("Load(MergeDomains): %v", err)
	}
	if got, want := s.Domains(), []string{"api", "c", "d", "db", "f", "git", "hidden", "web", "x", "y"}; !slices.Equal(got, want) {
		t.Errorf("Load(dir, MergeDomains).Domains() = %q, want %q", got, want)
	}
	if got, want := warnings(s), []string{
		filepath.Join(dir, "..data") + ": not read: a link to a directory, which the rate limit service does not follow either",
		filepath.Join(dir, "dirlink.yaml") + ": not read: a link to a directory, which the rate limit service does not follow either",
	}; !slices.Equal(got, want) {
		t.Errorf("Load(dir, MergeDomains).Warnings() = %q, want %q", got, want)
	}
	m := s.Match("api", e("k", "v"))
	if m.Rule == nil || m.Rule.File != filepath.Join(dir, "api.yaml") || m.Rule.Line != 3 {
		t.Errorf("Match(api, k=v).Rule = %+v, want one at %s:3", m.Rule, filepath.Join(dir, "api.yaml"))
	}

	// Through a link to the directory, as the service's RUNTIME_ROOT is,
	// files are named below the link.
	link := filepath.Join(t.TempDir(), "current")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	write(t, dir, map[string]string{"sub/bad.yaml": "domain: api\n"})
	_, err = Load(link, Options{IgnoreDotFiles: true})
	if got, want := problems(err), []string{filepath.Join(link, "sub/bad.yaml") + `:1: domain "api" is declared twice (first at ` + filepath.Join(link, "api.yaml") + `:1); one file per domain, unless merging domains`}; !slices.Equal(got, want) {
		t.Errorf("Load(link) problems %q, want %q", got, want)
	}
}

// With an application directory, as the service with RUNTIME_WATCH_ROOT,
// only files whose dotted path begins with it load.
func TestLoadAppDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, dir, map[string]string{
		"config/a.yaml":      "domain: a\n",
		"config/sub/b":       "domain: b\n",
		"config.yaml":        "domain: top\n",
		"configs/c.yaml":     "domain: c\n",
		"other.yaml":         "not: [valid",
		"config/.hidden":     "domain: hidden\n",
		"config.d/.x/y.yaml": "domain: y\n",
	})
	s, err := Load(dir, Options{AppDirectory: "config"})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got, want := s.Domains(), []string{"a", "b", "hidden", "top", "y"}; !slices.Equal(got, want) {
		t.Errorf("Load(AppDirectory).Domains() = %q, want %q", got, want)
	}
	s, err = Load(dir, Options{AppDirectory: "config", IgnoreDotFiles: true})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got, want := s.Domains(), []string{"a", "b", "top"}; !slices.Equal(got, want) {
		t.Errorf("Load(AppDirectory, IgnoreDotFiles).Domains() = %q, want %q", got, want)
	}
	if d1, d2 := s.Digest(), mustLoad(t, dir, Options{AppDirectory: "config"}).Digest(); d1 == d2 {
		t.Error("two sets loaded with different options have one digest")
	}
}

func mustLoad(t *testing.T, path string, opts Options) *Set {
	t.Helper()
	s, err := Load(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func warnings(s *Set) []string {
	var out []string
	for _, w := range s.Warnings() {
		out = append(out, w.String())
	}
	return out
}

func TestLoadFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, dir, map[string]string{
		"one.conf": "domain: one\n",
		"bad.yaml": "domain: bad\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
	})
	s, err := Load(filepath.Join(dir, "one.conf"), Options{})
	if err != nil || !slices.Equal(s.Domains(), []string{"one"}) {
		t.Errorf("Load(one.conf) = %v, %v", s, err)
	}
	_, err = Load(filepath.Join(dir, "bad.yaml"), Options{})
	if !errors.Is(err, ErrInvalid) || !strings.HasPrefix(err.Error(), filepath.Join(dir, "bad.yaml")+":4: ") {
		t.Errorf("Load(bad.yaml) = %v", err)
	}
	_, err = Load(filepath.Join(dir, "missing.yaml"), Options{})
	if !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrInvalid) || !strings.HasPrefix(err.Error(), "limits: ") {
		t.Errorf("Load(missing.yaml) = %v", err)
	}
	s, err = Load(t.TempDir(), Options{})
	if err != nil || s.Len() != 0 || len(s.Domains()) != 0 {
		t.Errorf("Load(empty directory) = %v, %v", s, err)
	}
}

func TestLoadTooLarge(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "big.yaml")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(maxFileSize + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, err = Load(p, Options{})
	if got, want := problems(err), []string{p + ":1: the file is larger than the 16777216 bytes a configuration file may be"}; !slices.Equal(got, want) {
		t.Errorf("Load(big.yaml) problems %q, want %q", got, want)
	}
}
