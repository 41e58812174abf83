package limits

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Load reads the configuration at path and parses it with [Parse]. path is
// one YAML file, or a directory: then every file below it whose name ends
// in .yaml or .yml is read, in lexical order, skipping files and
// directories whose names begin with "." (as the rate limit service's
// loader does with RUNTIME_IGNOREDOTFILES, and as a Kubernetes ConfigMap
// volume needs). path may be a symbolic link, as the service's
// RUNTIME_ROOT is; below it, links to files are followed and links to
// directories are not. Each file is named in errors and in [Rule.File] by
// its path: path joined with the file's path below it.
//
// An error reading a file is returned alone, wrapped with a "limits:"
// prefix; problems in the configuration are returned as [Parse] returns
// them.
func Load(path string, opts Options) (*Set, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("limits: %w", err)
	}
	if !info.IsDir() {
		data, err := readFile(path)
		if err != nil {
			return nil, fmt.Errorf("limits: %w", err)
		}
		return Parse(opts, File{Name: path, Data: data})
	}
	root, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, fmt.Errorf("limits: %w", err)
	}
	var files []File
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() || !isYAML(d.Name()) {
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			info, err := os.Stat(p)
			if err != nil {
				return err
			}
			if !info.Mode().IsRegular() {
				return nil // a link to a directory, or to a device
			}
		} else if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		data, err := readFile(p)
		if err != nil {
			return err
		}
		files = append(files, File{Name: filepath.Join(path, rel), Data: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("limits: %w", err)
	}
	return Parse(opts, files...)
}

// isYAML reports whether a file named name holds a configuration.
func isYAML(name string) bool {
	return strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")
}

// readFile reads the file at path, up to a byte more than a
// configuration file may hold: [Parse] reports one that large.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxFileSize+1))
}
