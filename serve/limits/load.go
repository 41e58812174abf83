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
// one file, or a directory: then every file below it is read, whatever
// its name, in lexical order, as envoyproxy/ratelimit's runtime loader
// (goruntime) reads its directory:
//
//   - files and directories whose names begin with "." are read too,
//     unless [Options.IgnoreDotFiles] (the service's
//     RUNTIME_IGNOREDOTFILES) skips them;
//   - a link to a file is followed; a link to a directory is not, and is
//     reported in [Set.Warnings], as is a file that cannot be read, and
//     the others load;
//   - with [Options.AppDirectory] (the service's RUNTIME_WATCH_ROOT, its
//     default), path is the runtime directory and only the files whose
//     path below it, "/" made ".", begins with the application directory
//     and a dot load: config/a.yaml and config.yaml, not b.yaml.
//
// A Kubernetes ConfigMap volume holds each file twice, once in a
// directory named "..<date>" and once as a link at the top: load it with
// IgnoreDotFiles, as the service needs RUNTIME_IGNOREDOTFILES there.
// path itself may be a symbolic link, as the service's RUNTIME_ROOT is.
// Each file is named in errors, warnings and [Rule.File] by its path:
// path joined with the file's path below it.
//
// An error reading path is returned alone, wrapped with a "limits:"
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
	var (
		files    []File
		warnings []Warning
	)
	warn := func(p, format string, args ...any) {
		warnings = append(warnings, Warning{File: p, Line: 0, Msg: fmt.Sprintf(format, args...)})
	}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(root, p)
		name := filepath.Join(path, rel)
		if err != nil {
			if p == root {
				return err
			}
			warn(name, "not read: %v", unwrapPath(err))
			if d != nil && d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if p == root {
			return nil
		}
		if opts.IgnoreDotFiles && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		if opts.AppDirectory != "" && !strings.HasPrefix(strings.ReplaceAll(filepath.ToSlash(rel), "/", "."), opts.AppDirectory+".") {
			return nil
		}
		info, err := os.Stat(p) // follows a link
		switch {
		case err != nil:
			warn(name, "not read: %v", unwrapPath(err))
			return nil
		case info.IsDir():
			warn(name, "not read: a link to a directory, which the rate limit service does not follow either")
			return nil
		case !info.Mode().IsRegular():
			warn(name, "not read: not a regular file (%v)", info.Mode().Type())
			return nil
		}
		data, err := readFile(p)
		if err != nil {
			warn(name, "not read: %v", unwrapPath(err))
			return nil
		}
		files = append(files, File{Name: name, Data: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("limits: %w", err)
	}
	s, err := Parse(opts, files...)
	if err != nil {
		return nil, err
	}
	s.warnings = append(warnings, s.warnings...)
	return s, nil
}

// unwrapPath returns err without the path a *fs.PathError repeats.
func unwrapPath(err error) error {
	if pe, ok := err.(*fs.PathError); ok {
		return fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	return err
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
