package compare

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/redistest"
)

// Commands is a count of the commands a Redis server executed, by name
// as INFO commandstats spells it ("incrby", "evalsha", "config|get").
// Redis counts a command that a script runs as well as the script's own
// EVALSHA, so a script of three calls counts four.
type Commands map[string]int64

// CommandStats returns the counts of INFO commandstats: every command r
// has executed since it started (or since CONFIG RESETSTAT).
func CommandStats(r *redistest.Server) (Commands, error) {
	reply, err := r.Do("INFO", "commandstats")
	if err != nil {
		return nil, fmt.Errorf("compare: INFO commandstats: %w", err)
	}
	info, err := reply.String()
	if err != nil {
		return nil, fmt.Errorf("compare: INFO commandstats: %w", err)
	}
	return parseCommandStats(info)
}

// parseCommandStats reads lines such as
// "cmdstat_incrby:calls=12,usec=30,usec_per_call=2.50,...".
func parseCommandStats(info string) (Commands, error) {
	c := Commands{}
	for line := range strings.Lines(info) {
		line = strings.TrimSpace(line)
		name, fields, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		if !ok || !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		calls, ok := "", false
		for f := range strings.SplitSeq(fields, ",") {
			if v, found := strings.CutPrefix(f, "calls="); found {
				calls, ok = v, true
			}
		}
		if !ok {
			return nil, fmt.Errorf("compare: INFO commandstats line %q has no calls", line)
		}
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("compare: INFO commandstats line %q: %w", line, err)
		}
		c[name] = n
	}
	return c, nil
}

// Sub returns the commands executed since before was taken: c minus
// before, leaving out the harness's own INFO.
func (c Commands) Sub(before Commands) Commands {
	d := Commands{}
	for name, n := range c {
		if name == "info" {
			continue
		}
		if n -= before[name]; n != 0 {
			d[name] = n
		}
	}
	return d
}

// Total returns the sum of the counts.
func (c Commands) Total() int64 {
	var n int64
	for _, v := range c {
		n += v
	}
	return n
}

// PerDecision formats each count divided by decisions, the largest
// first, leaving out commands of fewer than 0.01 per decision: "incrby
// 1.00, expire 1.00".
func (c Commands) PerDecision(decisions int64) string {
	if decisions <= 0 {
		return ""
	}
	names := slices.SortedFunc(maps.Keys(c), func(a, b string) int {
		if n := cmp.Compare(c[b], c[a]); n != 0 {
			return n
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, name := range names {
		if per := float64(c[name]) / float64(decisions); per >= 0.005 {
			parts = append(parts, fmt.Sprintf("%s %.2f", name, per))
		}
	}
	return strings.Join(parts, ", ")
}
