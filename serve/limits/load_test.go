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
		"README.md":            "not a configuration",
		"notes.txt":            "domain: txt\n",
		".hidden.yaml":         "domain: hidden\n",
		".git/config.yaml":     "domain: git\n",
		"sub/.cache/x.yaml":    "not: [even valid",
		"shared/shared.yaml":   "domain: shared\n",
		"..data/linked.yaml":   "domain: linked\n",
		"elsewhere/dir/y.yaml": "domain: y\n",
	})
	// A Kubernetes ConfigMap volume links each file into ..data, itself a
	// link; a link to a directory is not followed.
	if err := os.Symlink(filepath.Join(dir, "..data/linked.yaml"), filepath.Join(dir, "linked.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "elsewhere/dir"), filepath.Join(dir, "dirlink.yaml")); err != nil {
		t.Fatal(err)
	}
	s, err := Load(dir, Options{})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := []string{"api", "db", "linked", "shared", "web", "y"}
	if got := s.Domains(); !slices.Equal(got, want) {
		t.Errorf("Load(dir).Domains() = %q, want %q", got, want)
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
	_, err = Load(link, Options{})
	if got, want := problems(err), []string{filepath.Join(link, "sub/bad.yaml") + `:1: domain "api" is declared twice (first at ` + filepath.Join(link, "api.yaml") + `:1); one file per domain, unless merging domains`}; !slices.Equal(got, want) {
		t.Errorf("Load(link) problems %q, want %q", got, want)
	}
	if _, err := Load(link, Options{MergeDomains: true}); err != nil {
		t.Errorf("Load(link, MergeDomains): %v", err)
	}
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
