package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// metrics are one benchmark's figures in one round, by unit ("ns/op",
// "allocs/op", "decisions/s", …).
type metrics map[string]float64

// resultSet is everything one `make bench-compare` measured.
type resultSet struct {
	rounds    []map[string]metrics // each round's figures, by benchmark name
	overgrant [][]string           // overgrant.tsv's rows, without the header
	commands  map[string]string    // "workload/contender" → commands per decision
	ceiling   map[string]float64   // "script/client/workload/pipeline" → EVALSHA/s
	env       []string             // env.txt's lines
}

func load(dir string) (*resultSet, error) {
	rounds, err := filepath.Glob(filepath.Join(dir, "round-*.txt"))
	if err != nil {
		return nil, err
	}
	if len(rounds) == 0 {
		return nil, fmt.Errorf("%s holds no round-*.txt: run `make bench-compare`", dir)
	}
	sort.Strings(rounds)
	set := &resultSet{}
	for _, path := range rounds {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		round, err := parseBench(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		set.rounds = append(set.rounds, round)
	}
	over, err := readTSV(filepath.Join(dir, "overgrant.tsv"))
	if err != nil {
		return nil, err
	}
	set.overgrant = over
	cmds, err := readTSV(filepath.Join(dir, "commands.tsv"))
	if err != nil {
		return nil, err
	}
	set.commands = make(map[string]string)
	for _, row := range cmds {
		if len(row) != 3 {
			return nil, fmt.Errorf("commands.tsv: row %q: want 3 fields", row)
		}
		set.commands[row[0]+"/"+row[1]] = row[2]
	}
	ceil, err := readTSV(filepath.Join(dir, "ceiling.tsv"))
	if err != nil {
		return nil, err
	}
	set.ceiling = make(map[string]float64)
	for _, row := range ceil {
		if len(row) != 5 {
			return nil, fmt.Errorf("ceiling.tsv: row %q: want 5 fields (script, client, workload, pipeline, rps)", row)
		}
		v, err := strconv.ParseFloat(row[4], 64)
		if err != nil {
			return nil, fmt.Errorf("ceiling.tsv: %w", err)
		}
		set.ceiling[strings.Join(row[:4], "/")] = v
	}
	env, err := os.ReadFile(filepath.Join(dir, "env.txt"))
	if err != nil {
		return nil, err
	}
	set.env = strings.Split(strings.TrimSpace(string(env)), "\n")
	return set, nil
}

// parseBench reads `go test -bench` output: each result line's name,
// without "Benchmark" and the "-GOMAXPROCS" suffix, and its figures.
func parseBench(data []byte) (map[string]metrics, error) {
	out := make(map[string]metrics)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || !strings.HasPrefix(fields[0], "Benchmark") || len(fields)%2 != 0 {
			continue
		}
		if _, err := strconv.Atoi(fields[1]); err != nil {
			continue // a log line that starts with a benchmark's name
		}
		name := strings.TrimPrefix(fields[0], "Benchmark")
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		m := make(metrics)
		for i := 2; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				return nil, fmt.Errorf("%s: figure %q: %w", name, fields[i], err)
			}
			m[fields[i+1]] = v
		}
		out[name] = m
	}
	return out, sc.Err()
}

// readTSV reads a results file's rows after its header.
func readTSV(path string) ([][]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	var rows [][]string
	for _, line := range lines[1:] {
		rows = append(rows, strings.Split(line, "\t"))
	}
	return rows, nil
}

// ceilingRPS is the EVALSHA/s TestCeiling measured for script's command
// sent by client on workload, pipeline commands to a pipeline, and
// whether it was measured.
func (s *resultSet) ceilingRPS(script, client, workload string, pipeline int) (float64, bool) {
	v, ok := s.ceiling[fmt.Sprintf("%s/%s/%s/%d", script, client, workload, pipeline)]
	return v, ok
}

// median of the values; NaN-free input is assumed, and an empty one gives 0.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// values returns unit's figure for name in every round that has it.
func (s *resultSet) values(name, unit string) []float64 {
	var vs []float64
	for _, round := range s.rounds {
		if v, ok := round[name][unit]; ok {
			vs = append(vs, v)
		}
	}
	return vs
}

// med is the median of name's unit over the rounds, and whether there was
// any.
func (s *resultSet) med(name, unit string) (float64, bool) {
	vs := s.values(name, unit)
	return median(vs), len(vs) > 0
}

// ratios returns a's unit divided by b's, round by round, for the rounds
// that ran both.
func (s *resultSet) ratios(a, b, unit string) []float64 {
	var out []float64
	for _, round := range s.rounds {
		x, ok1 := round[a][unit]
		y, ok2 := round[b][unit]
		if ok1 && ok2 && y != 0 {
			out = append(out, x/y)
		}
	}
	return out
}

// diffs returns a's unit minus b's, round by round, for the rounds that
// ran both.
func (s *resultSet) diffs(a, b, unit string) []float64 {
	var out []float64
	for _, round := range s.rounds {
		x, ok1 := round[a][unit]
		y, ok2 := round[b][unit]
		if ok1 && ok2 {
			out = append(out, x-y)
		}
	}
	return out
}
