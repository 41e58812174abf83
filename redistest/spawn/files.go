package spawn

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// maxTail is how much of a log [Tail] returns at the most: what an error
// can quote and still be read.
const maxTail = 4096

// Tail returns what the file at path gained from offset from on, at most
// its last 4 KiB, or "" if it cannot be read: a server's log since a
// start, for an error that quotes it.
func Tail(path string, from int64) string {
	b, err := os.ReadFile(path)
	if err != nil || int64(len(b)) < from {
		return ""
	}
	b = b[from:]
	if len(b) > maxTail {
		b = b[len(b)-maxTail:]
	}
	return string(b)
}

// Copy makes a directory for one server, its name beginning with prefix,
// and copies tmpl into it as data/ (cp -a: owners and modes kept), for a
// server whose data directory is made once per test binary (initdb's,
// mariadb-install-db's) and copied for each server, which is much faster
// than making it again. It returns the directory, which the caller
// removes; on an error there is none.
func Copy(prefix, tmpl string) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	if out, err := exec.Command("cp", "-a", tmpl, filepath.Join(dir, "data")).CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("copying %s: %v: %s", tmpl, err, out)
	}
	return dir, nil
}
