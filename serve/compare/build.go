package compare

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"time"
)

// The packages the harness builds. The peer comes from the Go module
// proxy at the version peer/go.mod pins (its tool directive), built in
// that module of its own so that its dependencies are the ones it was
// written for; sluice-serve from the serve module next door, through the
// replace.
const (
	PeerPackage   = "github.com/envoyproxy/ratelimit/src/service_cmd"
	SluicePackage = "github.com/sluicehq/sluice/serve/cmd/sluice-serve"
)

// buildTimeout bounds one go build; a cold module cache makes the peer's
// first build take about 15 seconds.
const buildTimeout = 5 * time.Minute

// builds holds the binaries built by this test binary, in one temporary
// directory: each is built once, on first use, and the directory is
// removed by [RemoveBuilds].
var builds struct {
	mu   sync.Mutex
	dir  string
	done map[string]*build
}

type build struct {
	once sync.Once
	bin  string
	err  error
}

// PeerBinary returns the path of envoyproxy/ratelimit's server, built on
// first use with the Go toolchain on the PATH (go build of
// [PeerPackage] in the module in peer/).
func PeerBinary() (string, error) {
	return buildOnce("ratelimit", peerDir(), PeerPackage)
}

// SluiceBinary returns the path of sluice-serve, built on first use
// from the serve module ([SluicePackage]). It returns the build's error,
// output included, if the package does not build (yet).
func SluiceBinary() (string, error) {
	return buildOnce("sluice-serve", filepath.Dir(moduleDir()), SluicePackage)
}

// RemoveBuilds removes the binaries built so far. Call it once the tests
// are over (TestMain).
func RemoveBuilds() error {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if builds.dir == "" {
		return nil
	}
	err := os.RemoveAll(builds.dir)
	builds.dir, builds.done = "", nil
	return err
}

func buildOnce(name, dir, pkg string) (string, error) {
	builds.mu.Lock()
	if builds.dir == "" {
		d, err := os.MkdirTemp("", "sluice-compare-bin-")
		if err != nil {
			builds.mu.Unlock()
			return "", fmt.Errorf("compare: %w", err)
		}
		builds.dir, builds.done = d, map[string]*build{}
	}
	b := builds.done[name]
	if b == nil {
		b = &build{}
		builds.done[name] = b
	}
	out := filepath.Join(builds.dir, name)
	builds.mu.Unlock()
	b.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
		cmd.Dir = dir
		var buf bytes.Buffer
		cmd.Stdout, cmd.Stderr = &buf, &buf
		if err := cmd.Run(); err != nil {
			b.err = fmt.Errorf("compare: go build %s (in %s): %w\n%s", pkg, dir, err, buf.String())
			return
		}
		b.bin = out
	})
	return b.bin, b.err
}

// moduleDir returns the directory of this module's source, found from
// this file's path so that the current directory does not matter.
func moduleDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// peerDir returns the directory of the module the peer is built in.
func peerDir() string { return filepath.Join(moduleDir(), "peer") }
