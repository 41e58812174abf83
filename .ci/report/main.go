// Command report follows and sums up `go test -json` runs for make test.
//
//	go test -json ./... | report follow NAME FILE   # prints progress, keeps the events in FILE
//	report sum FILE...                             # one summary of every run; fails if any failed
//
// sum also reads FILE.times when there is one: the run's wall seconds on
// its first line, then the output of the shell's `times` builtin, whose
// second line is the CPU time (user, system) of the run's processes.
//
// follow prints each package's result as it ends, and the output of each
// failing test; sum counts the tests that passed, failed and were
// skipped in each run, names the failed and skipped ones (with the
// reason a skip gave), and exits 1 if any test, package or run failed.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// event is one line of `go test -json` (see `go doc test2json`).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	switch os.Args[1] {
	case "follow":
		if len(os.Args) != 4 {
			usage()
		}
		if err := follow(os.Args[2], os.Args[3], os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "report:", err)
			os.Exit(2)
		}
	case "sum":
		ok, err := sum(os.Args[2:], os.Stdout)
		if err != nil {
			fmt.Fprintln(os.Stderr, "report:", err)
			os.Exit(2)
		}
		if !ok {
			os.Exit(1)
		}
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: report follow NAME FILE < events | report sum FILE...")
	os.Exit(2)
}

// follow copies the events on in to the file path, after a first line
// naming the run, and prints a line for each package that ends and the
// output of each test that fails.
func follow(name, path string, in io.Reader, out io.Writer) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	defer w.Flush()
	fmt.Fprintf(w, "%s\n", name)
	outputs := map[string][]string{} // a running test's output, by package and test
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		line := sc.Bytes()
		w.Write(line)
		w.WriteByte('\n')
		var e event
		if json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(out, "%s\n", line) // the go command's own words: a build failure
			continue
		}
		id := e.Package + " " + e.Test
		switch {
		case e.Action == "output" && e.Test != "":
			outputs[id] = append(outputs[id], e.Output)
		case e.Action == "output" && e.Output != "PASS\n":
			fmt.Fprint(out, e.Output) // the package's result, or what its TestMain printed
		case e.Action == "fail" && e.Test != "":
			fmt.Fprint(out, strings.Join(outputs[id], ""))
			delete(outputs, id)
		case e.Test != "" && (e.Action == "pass" || e.Action == "skip"):
			delete(outputs, id)
		}
	}
	return sc.Err()
}

// counts are one run's results.
type counts struct {
	name                   string
	passed, failed, skips  int
	pkgOK, pkgFail         int
	failedTests, skipTests []string
	events                 int
	wall, cpu              float64 // seconds; -1 when not known
}

// sum prints one summary of the runs kept in paths, and reports whether
// they all passed.
func sum(paths []string, out io.Writer) (bool, error) {
	var runs []counts
	allOK := true
	for _, p := range paths {
		c, err := read(p)
		if err != nil {
			return false, err
		}
		if c.failed > 0 || c.pkgFail > 0 || c.events == 0 {
			allOK = false
		}
		runs = append(runs, c)
	}
	fmt.Fprintln(out, "\nmake test: summary")
	var total counts
	for _, c := range runs {
		verdict := "ok"
		switch {
		case c.events == 0:
			verdict = "DID NOT RUN"
		case c.failed > 0 || c.pkgFail > 0:
			verdict = "FAIL"
		}
		fmt.Fprintf(out, "  %-5s %-36s %s %3d packages ok, %d failed; tests %5d passed, %d failed, %d skipped\n",
			verdict, c.name, c.took(), c.pkgOK, c.pkgFail, c.passed, c.failed, c.skips)
		total.wall = max(total.wall, c.wall)
		total.cpu += max(c.cpu, 0)
		total.passed += c.passed
		total.failed += c.failed
		total.skips += c.skips
		total.pkgOK += c.pkgOK
		total.pkgFail += c.pkgFail
	}
	fmt.Fprintf(out, "  total: %d packages ok, %d failed; tests %d passed, %d failed, %d skipped; CPU %.0f s\n",
		total.pkgOK, total.pkgFail, total.passed, total.failed, total.skips, total.cpu)
	for _, c := range runs {
		for _, t := range c.skipTests {
			fmt.Fprintf(out, "  skipped: %s\n", t)
		}
	}
	for _, c := range runs {
		for _, t := range c.failedTests {
			fmt.Fprintf(out, "  FAILED:  %s\n", t)
		}
	}
	if allOK {
		fmt.Fprintln(out, "make test: PASS")
	} else {
		fmt.Fprintln(out, "make test: FAIL")
	}
	return allOK, nil
}

// read counts the events kept in path by follow.
func read(path string) (counts, error) {
	f, err := os.Open(path)
	if err != nil {
		return counts{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	var c counts
	if sc.Scan() {
		c.name = sc.Text()
	}
	skipWhy := map[string]string{} // the last output line of a test, by package and test
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		c.events++
		id := e.Package + " " + e.Test
		switch {
		case e.Test == "" && e.Action == "pass":
			c.pkgOK++
		case e.Test == "" && e.Action == "fail":
			c.pkgFail++
		case e.Test != "" && e.Action == "output":
			if s := strings.TrimSpace(e.Output); s != "" && !strings.HasPrefix(s, "---") && !strings.HasPrefix(s, "===") {
				skipWhy[id] = s
			}
		case e.Test != "" && e.Action == "pass":
			c.passed++
		case e.Test != "" && e.Action == "fail":
			c.failed++
			c.failedTests = append(c.failedTests, id)
		case e.Test != "" && e.Action == "skip":
			c.skips++
			c.skipTests = append(c.skipTests, id+": "+skipWhy[id])
		}
	}
	slices.Sort(c.failedTests)
	slices.Sort(c.skipTests)
	if err := sc.Err(); err != nil {
		return c, err
	}
	c.wall, c.cpu = readTimes(path + ".times")
	return c, nil
}

// took is the run's wall and CPU time, as the summary prints it.
func (c counts) took() string {
	if c.wall < 0 {
		return fmt.Sprintf("%16s", "")
	}
	return fmt.Sprintf("%4.0f s, CPU %4.0f s", c.wall, c.cpu)
}

// readTimes reads a run's wall and CPU seconds from path (see the
// package comment); -1 for each it cannot read.
func readTimes(path string) (wall, cpu float64) {
	b, err := os.ReadFile(path)
	if err != nil {
		return -1, -1
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	wall, cpu = -1, -1
	if w, err := strconv.ParseFloat(strings.TrimSpace(lines[0]), 64); err == nil {
		wall = w
	}
	if len(lines) == 3 {
		var sum float64
		for _, f := range strings.Fields(lines[2]) {
			d, err := time.ParseDuration(f)
			if err != nil {
				return wall, -1
			}
			sum += d.Seconds()
		}
		cpu = sum
	}
	return wall, cpu
}
