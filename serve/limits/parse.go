package limits

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
)

// The bounds on what a configuration may hold. The package documentation
// lists them.
const (
	// MaxDepth is the deepest descriptors may nest: a domain's
	// descriptors are at depth 1.
	MaxDepth = 16

	maxDomainLen   = 128
	maxKeyLen      = 256
	maxValueLen    = 512
	maxNameLen     = 256
	maxReplaces    = 64
	maxFileSize    = 16 << 20
	maxDescriptors = 1 << 17
	// maxWork bounds the YAML nodes visited, each alias counted each
	// time it is used, so that a few aliases cannot make a small file
	// expand without limit.
	maxWork = 1 << 22
	// maxMerge bounds merge keys within merge keys.
	maxMerge = 8
	// maxErrors is the most problems reported; more are counted.
	maxErrors = 100
)

// Parse builds a [Set] from files, each a YAML document in the rate limit
// service's format (see the package documentation). It reports every
// problem it finds in all of them, joined with [errors.Join], each an
// [*Error] naming the file and line; it returns a Set only if there are
// none.
func Parse(opts Options, files ...File) (*Set, error) {
	l := &loader{opts: opts, set: &Set{domains: map[string]*node{}}, declared: map[string]string{}}
	for _, f := range files {
		l.file = f.Name
		l.parseFile(f.Data)
	}
	if len(l.errs) > 0 {
		if l.dropped > 0 {
			l.errs = append(l.errs, &Error{File: l.firstDropped.File, Line: l.firstDropped.Line,
				Msg: fmt.Sprintf("and %d more problems", l.dropped)})
		}
		return nil, errors.Join(l.errs...)
	}
	for d := range l.set.domains {
		l.set.names = append(l.set.names, d)
	}
	slices.Sort(l.set.names)
	l.set.digest = digest(opts, files)
	return l.set, nil
}

// loader builds a Set, collecting problems.
type loader struct {
	opts Options
	set  *Set
	file string // the file being read
	// declared says where each domain was first declared, "file:line".
	declared     map[string]string
	errs         []error
	dropped      int
	firstDropped Error
	work         int
	descriptors  int
	// stopped is set when the configuration is too large to go on.
	stopped bool
}

// stop records that the configuration is too large to go on reading, with
// a problem reported even past maxErrors.
func (l *loader) stop(line int, format string, args ...any) {
	if l.stopped {
		return
	}
	l.stopped = true
	if len(l.errs) == maxErrors { // make room
		if last, ok := l.errs[maxErrors-1].(*Error); ok && l.dropped == 0 {
			l.firstDropped = Error{File: last.File, Line: last.Line}
		}
		l.errs = l.errs[:maxErrors-1]
		l.dropped++
	}
	l.errorf(line, "", format, args...)
}

// problems returns the number of problems found so far, so that a caller
// can tell whether a call found one.
func (l *loader) problems() int { return len(l.errs) + l.dropped }

// errorf records a problem at line of the current file. ctx, if not "",
// says where: `descriptor "a_b.c"`.
func (l *loader) errorf(line int, ctx, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if ctx != "" {
		msg = ctx + ": " + msg
	}
	if line < 1 {
		line = 1
	}
	if len(l.errs) == maxErrors {
		if l.dropped == 0 {
			l.firstDropped = Error{File: l.file, Line: line}
		}
		l.dropped++
		return
	}
	l.errs = append(l.errs, &Error{File: l.file, Line: line, Msg: msg})
}

// warnf records a warning at line of the current file; ctx as errorf's.
func (l *loader) warnf(line int, ctx, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if ctx != "" {
		msg = ctx + ": " + msg
	}
	if len(l.set.warnings) < maxErrors {
		l.set.warnings = append(l.set.warnings, Warning{File: l.file, Line: max(line, 1), Msg: msg})
	}
}

// spend counts n nodes of work, and reports false, once with an error,
// when the configuration has taken too much.
func (l *loader) spend(n int, line int) bool {
	if l.stopped {
		return false
	}
	l.work += n
	if l.work > maxWork {
		l.stop(line, "the configuration is too large: more than %d YAML nodes, each alias counted every time it is used", maxWork)
		return false
	}
	return true
}

// deref follows aliases to the node they stand for.
func (l *loader) deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode; i++ {
		if i == maxMerge || !l.spend(1, n.Line) {
			return nil
		}
		n = n.Alias
	}
	return n
}

// parseFile reads one file into the set.
func (l *loader) parseFile(data []byte) {
	if l.stopped {
		return
	}
	if len(data) > maxFileSize {
		l.errorf(1, "", "the file is larger than the %d bytes a configuration file may be", maxFileSize)
		return
	}
	root, ok := l.decode(data)
	if !ok {
		return
	}
	l.root(root)
}

// decode parses data's one YAML document, returning its root node (nil
// for an empty file).
func (l *loader) decode(data []byte) (root *yaml.Node, ok bool) {
	defer func() {
		// The YAML parser reports errors as errors; this is for a bug
		// in it, which must not take the server down.
		if r := recover(); r != nil {
			l.errorf(problemLine(data), "", "invalid YAML: the parser failed: %v", r)
			root, ok = nil, false
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if err == io.EOF {
			return nil, true
		}
		l.yamlError(err, data)
		return nil, false
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == io.EOF:
	case err != nil:
		l.yamlError(err, data)
		return nil, false
	case !emptyDocument(&extra):
		l.errorf(extra.Line, "", "a second YAML document; a configuration file holds one (the rate limit service would read only the first)")
	}
	if len(doc.Content) == 0 {
		return nil, true
	}
	return doc.Content[0], true
}

// emptyDocument reports whether doc holds nothing, as a "---" at the end
// of a file makes.
func emptyDocument(doc *yaml.Node) bool {
	if len(doc.Content) == 0 {
		return true
	}
	n := doc.Content[0]
	if n.Kind != yaml.ScalarNode {
		return false
	}
	s, problem := resolve(n)
	return problem == "" && s.kind == kindNull
}

// yamlError records a YAML syntax error, at the line the parser names.
func (l *loader) yamlError(err error, data []byte) {
	msg, _ := strings.CutPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, after, ok := strings.Cut(rest, ": "); ok {
			if n, err := strconv.Atoi(num); err == nil {
				line, msg = n, after
			}
		}
	}
	if line == 0 {
		line = problemLine(data)
	}
	l.errorf(line, "", "invalid YAML: %s", msg)
}

// problemLine returns the line of the first byte YAML does not allow:
// invalid UTF-8, or a control character. The parser's errors for those
// name no line. It returns 1 if there is none.
func problemLine(data []byte) int {
	line := 1
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		switch {
		case r == utf8.RuneError && size == 1,
			r < 0x20 && r != '\t' && r != '\n' && r != '\r',
			r >= 0x7F && r < 0xA0 && r != 0x85,
			r >= 0xD800 && r < 0xE000,
			r == 0xFFFE || r == 0xFFFF:
			return line
		case r == '\n':
			line++
		}
		i += size
	}
	return 1
}

// The parts of a file. Each key belongs in one (name in two).
type section int

const (
	topLevel section = iota
	inDescriptor
	inRateLimit
	inReplaces
)

func (s section) String() string {
	switch s {
	case topLevel:
		return "the top level"
	case inDescriptor:
		return "a descriptor"
	case inRateLimit:
		return "rate_limit"
	}
	return "a replaces entry"
}

// sections lists where each key belongs. The keys of the rate limit
// service are those of its validKeys; algorithm, burst, limit and
// allotment are sluice's, which the service rejects.
var sections = map[string][]section{
	"domain":            {topLevel},
	"descriptors":       {topLevel, inDescriptor},
	"key":               {inDescriptor},
	"value":             {inDescriptor},
	"rate_limit":        {inDescriptor},
	"shadow_mode":       {inDescriptor},
	"quota_mode":        {inDescriptor},
	"detailed_metric":   {inDescriptor},
	"value_to_metric":   {inDescriptor},
	"share_threshold":   {inDescriptor},
	"unit":              {inRateLimit},
	"requests_per_unit": {inRateLimit},
	"unlimited":         {inRateLimit},
	"name":              {inRateLimit, inReplaces},
	"replaces":          {inRateLimit},
	"algorithm":         {inRateLimit},
	"burst":             {inRateLimit},
	"limit":             {inRateLimit},
	"allotment":         {inRateLimit},
}

// renamed maps a key sluice once read to the key that took its place: a
// configuration that still says the old one fails to load, naming the
// new one, rather than losing the setting in silence.
var renamed = map[string]string{"lease": "allotment"}

// field is one key of a mapping and its value. The zero field is a key
// that is absent.
type field struct{ key, val *yaml.Node }

// line returns the line of f's value, else of its key, else def.
func (f field) line(def int) int {
	switch {
	case f.val != nil && f.val.Line > 0:
		return f.val.Line
	case f.key != nil:
		return f.key.Line
	}
	return def
}

// fields returns the keys of mapping n, which is in section sec. Keys must
// be strings, belong in sec and appear once; the merge key << brings in
// the keys of the mappings it names that n lacks, as YAML defines it and
// yaml.v2 reads it.
func (l *loader) fields(n *yaml.Node, sec section, ctx string) map[string]field {
	out := make(map[string]field, len(n.Content)/2)
	l.collect(out, n, sec, ctx, 0, true)
	return out
}

// collect adds the keys of mapping n to out: its own first, which win
// (and must not repeat if explicit), then those of its merge keys.
func (l *loader) collect(out map[string]field, n *yaml.Node, sec section, ctx string, depth int, explicit bool) {
	if !l.spend(len(n.Content)+1, n.Line) {
		return
	}
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if isMergeKey(k) {
			merges = append(merges, v)
			continue
		}
		name, ok := l.keyName(k, sec, ctx)
		if !ok {
			continue
		}
		if prev, dup := out[name]; dup {
			if !explicit {
				continue // a merged mapping's: the first wins
			}
			// The rate limit service reads the file with yaml.v2, which
			// keeps the last of a repeated key.
			l.warnf(k.Line, ctx, "key %q repeats the one at line %d; the last wins, as the rate limit service reads it", name, prev.key.Line)
		}
		out[name] = field{key: k, val: v}
	}
	for _, m := range merges {
		if depth == maxMerge {
			l.errorf(m.Line, ctx, "merge keys (<<) nested more than %d deep", maxMerge)
			return
		}
		m = l.deref(m)
		if m == nil {
			continue
		}
		switch m.Kind {
		case yaml.MappingNode:
			l.collect(out, m, sec, ctx, depth+1, false)
		case yaml.SequenceNode:
			for _, item := range m.Content {
				if item = l.deref(item); item != nil && item.Kind == yaml.MappingNode {
					l.collect(out, item, sec, ctx, depth+1, false)
				} else if item != nil {
					l.errorf(item.Line, ctx, "a merge key (<<) lists %s; want mappings", what(item))
				}
			}
		default:
			l.errorf(m.Line, ctx, "a merge key (<<) names %s; want a mapping or a list of mappings", what(m))
		}
	}
}

// keyName returns the name of mapping key k in section sec, or reports
// why it is not one.
func (l *loader) keyName(k *yaml.Node, sec section, ctx string) (string, bool) {
	k = l.deref(k)
	if k == nil {
		return "", false
	}
	if k.Kind != yaml.ScalarNode {
		l.errorf(k.Line, ctx, "a key is %s; keys must be strings", what(k))
		return "", false
	}
	s, problem := resolve(k)
	switch {
	case problem != "":
		l.errorf(k.Line, ctx, "key %s: %s", k.Value, problem)
		return "", false
	case s.kind != kindString:
		l.errorf(k.Line, ctx, "key %s is %s; keys must be strings", k.Value, s.kind)
		return "", false
	}
	name := k.Value
	homes, known := sections[name]
	switch {
	case slices.Contains(homes, sec):
		return name, true
	case known:
		l.errorf(k.Line, ctx, "key %q does not belong in %s; it belongs in %s", name, sec, homes[0])
	case renamed[name] != "":
		l.errorf(k.Line, ctx, "key %q is now named %q: rename it (docs/changes.md)", name, renamed[name])
	default:
		msg := fmt.Sprintf("unknown key %q", name)
		if s := suggest(name, sec); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		}
		l.errorf(k.Line, ctx, "%s", msg)
	}
	return "", false
}

// suggest returns the key of section sec that name is most likely a
// misspelling of, or "".
func suggest(name string, sec section) string {
	squash := func(s string) string {
		return strings.NewReplacer("_", "", "-", "", " ", "").Replace(strings.ToLower(s))
	}
	best, bestDist := "", 3
	for k, homes := range sections {
		if !slices.Contains(homes, sec) {
			continue
		}
		if squash(k) == squash(name) {
			return k
		}
		if d := distance(k, name); d < bestDist || d == bestDist && k < best {
			best, bestDist = k, d
		}
	}
	if bestDist > 2 {
		return ""
	}
	return best
}

// distance returns the edit distance of a and b, or 3 if it is more.
func distance(a, b string) int {
	if len(a) > 64 || len(b) > 64 || len(a)-len(b) > 2 || len(b)-len(a) > 2 {
		return 3
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return min(prev[len(b)], 3)
}

// what describes node n for errors: "a mapping", "a list", "the string
// "x"".
func what(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		s, problem := resolve(n)
		if problem != "" || s.kind == kindString {
			return "the string " + strconv.Quote(clip(n.Value))
		}
		if s.kind == kindNull {
			return "null"
		}
		return s.kind.String() + " (" + clip(n.Value) + ")"
	}
	return "an alias"
}

// clip shortens s for an error.
func clip(s string) string {
	if len(s) <= 40 {
		return s
	}
	return s[:37] + "..."
}

// value returns f's value: nil if the key is absent or its value null
// (which the service reads as absent too).
func (l *loader) value(f field) *yaml.Node {
	v := l.deref(f.val)
	if v == nil || v.Kind != yaml.ScalarNode {
		return v
	}
	if s, problem := resolve(v); problem == "" && s.kind == kindNull {
		return nil
	}
	return v
}

// text returns f's value as a string, as the service reads it: a
// scalar's text, whether it looks like a string, an integer or a
// boolean; "" if absent or null. The service rejects floats and integers
// beyond int64 everywhere, and so does text.
func (l *loader) text(f field, ctx string) string {
	v := l.value(f)
	if v == nil {
		return ""
	}
	if v.Kind != yaml.ScalarNode {
		l.errorf(v.Line, ctx, "%s is %s; want a string", f.key.Value, what(v))
		return ""
	}
	s, problem := resolve(v)
	switch {
	case problem != "":
		l.errorf(v.Line, ctx, "%s: %s", f.key.Value, problem)
		return ""
	case s.kind == kindFloat || s.kind == kindBigInt:
		l.errorf(v.Line, ctx, "%s is %s (%s), which the rate limit service rejects; quote it to make it a string", f.key.Value, s.kind, clip(v.Value))
		return ""
	}
	return v.Value
}

// flag returns f's value as a boolean: false if absent or null. As the
// service does, it reads YAML 1.1's yes, no, on and off too.
func (l *loader) flag(f field, ctx string) bool {
	v := l.value(f)
	if v == nil {
		return false
	}
	if v.Kind == yaml.ScalarNode {
		if s, problem := resolve(v); problem == "" && s.kind == kindBool {
			return s.b
		}
	}
	l.errorf(v.Line, ctx, "%s is %s; want true or false", f.key.Value, what(v))
	return false
}

// integer returns f's value as an integer in [lo, hi]; 0 if absent or
// null.
func (l *loader) integer(f field, ctx string, lo, hi int64) int64 {
	v := l.value(f)
	if v == nil {
		return 0
	}
	if v.Kind == yaml.ScalarNode {
		if s, problem := resolve(v); problem == "" && s.kind == kindInt {
			if s.i < lo || s.i > hi {
				l.errorf(v.Line, ctx, "%s %s is out of range (%d to %d)", f.key.Value, v.Value, lo, hi)
				return 0
			}
			return s.i
		} else if problem == "" && s.kind == kindBigInt {
			l.errorf(v.Line, ctx, "%s %s is out of range (%d to %d)", f.key.Value, v.Value, lo, hi)
			return 0
		}
	}
	l.errorf(v.Line, ctx, "%s is %s; want a whole number", f.key.Value, what(v))
	return 0
}

// list returns f's value as a list: nil if absent or null.
func (l *loader) list(f field, ctx string) []*yaml.Node {
	v := l.value(f)
	if v == nil {
		return nil
	}
	if v.Kind != yaml.SequenceNode {
		l.errorf(v.Line, ctx, "%s is %s; want a list", f.key.Value, what(v))
		return nil
	}
	return v.Content
}

// mapping returns f's value as a mapping: nil if absent or null.
func (l *loader) mapping(f field, ctx string) *yaml.Node {
	v := l.value(f)
	if v == nil {
		return nil
	}
	if v.Kind != yaml.MappingNode {
		l.errorf(v.Line, ctx, "%s is %s; want a mapping", f.key.Value, what(v))
		return nil
	}
	return v
}

// root reads a file's top level: its domain and descriptors.
func (l *loader) root(n *yaml.Node) {
	if n = l.deref(n); n != nil && n.Kind == yaml.ScalarNode {
		if s, problem := resolve(n); problem == "" && s.kind == kindNull {
			n = nil // a file that holds only null
		}
	}
	if n == nil {
		l.errorf(1, "", "the file has no domain; want a mapping with domain and descriptors")
		return
	}
	if n.Kind != yaml.MappingNode {
		l.errorf(n.Line, "", "the file is %s; want a mapping with domain and descriptors", what(n))
		return
	}
	f := l.fields(n, topLevel, "")
	n0 := l.problems()
	domain := l.text(f["domain"], "")
	line := f["domain"].line(n.Line)
	keep := true
	switch {
	case l.problems() != n0:
		keep = false // reported
	case f["domain"].key == nil:
		l.errorf(n.Line, "", "the file has no domain")
		keep = false
	case domain == "":
		l.errorf(line, "", "domain is empty")
		keep = false
	case len(domain) > maxDomainLen:
		l.errorf(line, "", "domain is %d bytes, longer than %d", len(domain), maxDomainLen)
		keep = false
	}
	root := &node{}
	if prev, ok := l.set.domains[domain]; ok && keep {
		if l.opts.MergeDomains {
			root = prev
		} else {
			l.errorf(line, "", "domain %q is declared twice (first at %s); one file per domain, unless merging domains", domain, l.declared[domain])
			keep = false
		}
	} else if keep {
		l.set.domains[domain] = root
		l.declared[domain] = l.file + ":" + strconv.Itoa(line)
	}
	l.descriptorList(root, f["descriptors"], domain, "", 1, keep)
}

// descriptorList reads the descriptors of f into parent, at depth.
// Unless keep, parent is thrown away: it is read for its problems alone.
func (l *loader) descriptorList(parent *node, f field, domain, path string, depth int, keep bool) {
	ctx := where(path)
	items := l.list(f, ctx)
	if len(items) > 0 && depth > MaxDepth {
		l.errorf(f.key.Line, ctx, "descriptors nest more than %d deep", MaxDepth)
		return
	}
	for _, item := range items {
		item = l.deref(item)
		switch {
		case item == nil:
			return // out of work
		case item.Kind != yaml.MappingNode:
			l.errorf(item.Line, ctx, "a descriptor is %s; want a mapping with key, value, rate_limit or descriptors", what(item))
			continue
		}
		if l.descriptors++; l.descriptors > maxDescriptors {
			l.stop(item.Line, "the configuration is too large: more than %d descriptors", maxDescriptors)
		}
		if l.stopped {
			return
		}
		l.descriptor(parent, item, domain, path, depth, keep)
	}
}

// join returns the path of descriptor composite under parent.
func join(parent, composite string) string {
	if parent == "" {
		return composite
	}
	return parent + "." + composite
}

// peekComposite returns the composite key of descriptor n, read without
// checking anything, or "" if it has no plain key.
func peekComposite(n *yaml.Node) string {
	var key, value string
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || v.Kind != yaml.ScalarNode {
			continue
		}
		if s, problem := resolve(v); problem != "" || s.kind == kindNull {
			continue
		}
		switch k.Value {
		case "key":
			key = v.Value
		case "value":
			value = v.Value
		}
	}
	if key == "" || value == "" {
		return key
	}
	return key + "_" + value
}

// where returns the error context of a descriptor at path ("" at the
// top level).
func where(path string) string {
	if path == "" {
		return ""
	}
	if len(path) > 200 {
		path = path[:197] + "..."
	}
	return "descriptor " + strconv.Quote(path)
}

// descriptor reads descriptor n into parent.
func (l *loader) descriptor(parent *node, n *yaml.Node, domain, parentPath string, depth int, keep bool) {
	pctx := where(parentPath)
	// Problems with the descriptor's other keys name it, if it has a key.
	fctx := pctx
	if c := peekComposite(n); c != "" {
		fctx = where(join(parentPath, c))
	}
	f := l.fields(n, inDescriptor, fctx)
	key := l.text(f["key"], pctx)
	value := l.text(f["value"], pctx)
	composite := key
	if value != "" {
		composite += "_" + value
	}
	segment, ok := composite, true
	if key == "" {
		l.errorf(n.Line, pctx, "a descriptor has an empty key")
		segment, ok = "(no key)", false
	}
	if len(key) > maxKeyLen {
		l.errorf(f["key"].line(n.Line), pctx, "key is %d bytes, longer than %d", len(key), maxKeyLen)
		ok = false
	}
	if len(value) > maxValueLen {
		l.errorf(f["value"].line(n.Line), pctx, "value is %d bytes, longer than %d", len(value), maxValueLen)
		ok = false
	}
	path := join(parentPath, segment)
	ctx := where(path)
	d := &node{
		valueToMetric:  l.flag(f["value_to_metric"], ctx),
		shareThreshold: l.flag(f["share_threshold"], ctx),
		file:           l.file,
		line:           n.Line,
	}
	if d.shareThreshold && !strings.HasSuffix(composite, "*") {
		l.errorf(f["share_threshold"].line(n.Line), ctx, "share_threshold applies only to a wildcard value, one ending in \"*\"")
	}
	if l.flag(f["quota_mode"], ctx) {
		l.errorf(f["quota_mode"].line(n.Line), ctx, "quota_mode is not supported by sluice")
	}
	shadow := l.flag(f["shadow_mode"], ctx)
	detailed := l.flag(f["detailed_metric"], ctx)
	if rl := l.mapping(f["rate_limit"], ctx); rl != nil {
		if r := l.rule(rl, ctx); r != nil {
			r.Shadow, r.DetailedMetric = shadow, detailed
			r.ValueToMetric, r.ShareThreshold = d.valueToMetric, d.shareThreshold
			r.Path, r.File, r.Line = domain+"."+path, l.file, n.Line
			d.rule = r
		}
	}
	l.descriptorList(d, f["descriptors"], domain, path, depth+1, keep)
	if !ok {
		return
	}
	if prev, dup := parent.children[composite]; dup {
		l.errorf(n.Line, ctx, "declared twice (first at %s:%d)", prev.file, prev.line)
		return
	}
	parent.add(composite, d)
	if keep && d.rule != nil {
		l.set.rules++
		if d.rule.Allotment > 0 {
			l.set.allotted++
		}
	}
}

// rule reads rate_limit mapping n of the descriptor ctx names: all but
// the fields that come from the descriptor. It returns nil if the rule
// has problems.
func (l *loader) rule(n *yaml.Node, ctx string) *Rule {
	before := l.problems()
	f := l.fields(n, inRateLimit, ctx)
	r := &Rule{Terms: core.Terms{Algorithm: algorithms.FixedWindow}}

	r.Name = l.text(f["name"], ctx)
	if len(r.Name) > maxNameLen {
		l.errorf(f["name"].line(n.Line), ctx, "name is %d bytes, longer than %d", len(r.Name), maxNameLen)
	}
	replaces := l.list(f["replaces"], ctx)
	if len(replaces) > maxReplaces {
		l.errorf(f["replaces"].line(n.Line), ctx, "replaces lists %d rules, more than %d", len(replaces), maxReplaces)
		replaces = nil
	}
	for _, item := range replaces {
		item = l.deref(item)
		switch {
		case item == nil:
			continue
		case item.Kind != yaml.MappingNode:
			l.errorf(item.Line, ctx, "a replaces entry is %s; want a mapping with a name", what(item))
			continue
		}
		name := l.text(l.fields(item, inReplaces, ctx)["name"], ctx)
		switch {
		case name == "":
			l.errorf(item.Line, ctx, "a replaces entry has an empty name")
		case name == r.Name:
			l.errorf(item.Line, ctx, "replaces its own name %q", name)
		}
		r.Replaces = append(r.Replaces, name)
	}

	algSet := l.value(f["algorithm"]) != nil
	if name := l.text(f["algorithm"], ctx); algSet {
		alg, err := algorithms.ByName(name)
		switch {
		case err != nil:
			l.errorf(f["algorithm"].line(n.Line), ctx, "unknown algorithm %q (want token-bucket, gcra, fixed-window, sliding-window-counter or sliding-window-log)", name)
		case !slices.Contains(algorithms.All(), alg):
			l.errorf(f["algorithm"].line(n.Line), ctx, "algorithm %q limits concurrent leases, not a rate; it cannot be used here", name)
		default:
			r.Algorithm = alg
		}
	}
	unlimited := l.flag(f["unlimited"], ctx)
	unitText := l.text(f["unit"], ctx)
	unit, unitOK := lookupUnit(unitText)
	unitBad := unitText != "" && (!unitOK || unit.unit == rlsv3.RateLimitResponse_RateLimit_UNKNOWN)
	if unitBad {
		l.errorf(f["unit"].line(n.Line), ctx, "invalid rate limit unit %q (%s)", unitText, wantUnit)
	}
	rpuSet := l.value(f["requests_per_unit"]) != nil
	perUnit := l.integer(f["requests_per_unit"], ctx, 0, math.MaxUint32)
	rateLine := f["requests_per_unit"].line(f["unit"].line(n.Line))
	limitSet := l.value(f["limit"]) != nil
	limitText := l.text(f["limit"], ctx)
	burstSet := l.value(f["burst"]) != nil
	n0 := l.problems()
	burst := l.integer(f["burst"], ctx, 1, core.MaxUnits)
	burstSet = burstSet && l.problems() == n0 // else reported

	switch {
	case limitSet && (unlimited || unitText != "" || rpuSet):
		l.errorf(f["limit"].line(n.Line), ctx, "limit is given with unit, requests_per_unit or unlimited; give limit alone, or those without it")
	case limitSet:
		rateLine = f["limit"].line(n.Line)
		lim, err := core.ParseLimit(limitText)
		if err != nil {
			l.errorf(rateLine, ctx, "invalid limit %s", strings.TrimPrefix(err.Error(), core.ErrInvalidLimit.Error()+": "))
			break
		}
		if lim.IsInf() {
			r.Unlimited = true
			break
		}
		if burstSet && slices.Contains(strings.Fields(limitText), "burst") {
			l.errorf(f["burst"].line(n.Line), ctx, "burst is given twice, in limit and on its own")
			break
		}
		if !bucket(r.Algorithm) && lim.Burst() != lim.Rate() {
			l.errorf(rateLine, ctx, "a burst applies only to the token-bucket and gcra algorithms, not %s", r.Algorithm.Name())
			break
		}
		r.Unit, r.RequestsPerUnit = unitOf(lim)
		r.Limit = l.withBurst(lim, r.Algorithm, burstSet, burst, f["burst"].line(rateLine), ctx)
	case unlimited:
		r.Unlimited = true
		if unitText != "" && !unitBad {
			l.errorf(f["unit"].line(n.Line), ctx, "unit %q is given with unlimited: true; remove one", unitText)
		}
		// The service ignores requests_per_unit here, and so does sluice.
		r.RequestsPerUnit = uint32(perUnit)
	case unitBad:
		// reported
	case unitText == "":
		l.errorf(f["unit"].line(n.Line), ctx, "rate_limit has no unit (%s), nor unlimited: true or a limit", wantUnit)
	case perUnit == 0:
		// The service accepts it, and answers every request OVER_LIMIT.
		r.Deny, r.Unit = true, unit.unit
		if burstSet {
			l.errorf(f["burst"].line(n.Line), ctx, "burst is given with requests_per_unit 0, which denies every request")
		}
	default:
		r.Unit, r.RequestsPerUnit = unit.unit, uint32(perUnit)
		lim := core.Per(perUnit, unit.period)
		if !burstSet && !bucket(r.Algorithm) {
			lim = WindowLimit(perUnit, unit.period)
		}
		r.Limit = l.withBurst(lim, r.Algorithm, burstSet, burst, f["burst"].line(rateLine), ctx)
	}
	if r.Unlimited {
		r.Limit, r.Unit = core.Inf, rlsv3.RateLimitResponse_RateLimit_UNKNOWN
		if algSet {
			l.errorf(f["algorithm"].line(n.Line), ctx, "algorithm is given for an unlimited rule, which keeps no state")
		}
		if burstSet {
			l.errorf(f["burst"].line(n.Line), ctx, "burst is given for an unlimited rule")
		}
	}
	if set := l.value(f["allotment"]) != nil; set || l.opts.Allotment > 0 {
		n0 := l.problems()
		most := l.integer(f["allotment"], ctx, 0, math.MaxUint32)
		switch {
		case l.problems() != n0:
		case !set:
			// Options.Allotment: the rules large enough that an
			// allotment strands at most a hundredth of the limit.
			if r.Limit.Validate() == nil && !r.Unlimited && int64(r.RequestsPerUnit) >= 100*l.opts.Allotment && allottable(r.Algorithm) {
				most = l.opts.Allotment
			}
		case most > 0 && (r.Unlimited || r.Deny):
			l.errorf(f["allotment"].line(n.Line), ctx, "allotment is given for a rule that keeps no state")
		case most > 0 && !allottable(r.Algorithm):
			l.errorf(f["allotment"].line(n.Line), ctx, "allotment applies to the fixed-window, token-bucket and gcra algorithms, not %s", r.Algorithm.Name())
		case most > 0 && r.Limit.Validate() == nil && most > maxAllotment(r):
			l.errorf(f["allotment"].line(n.Line), ctx, "allotment %d is more than the limit's capacity, %d", most, maxAllotment(r))
		}
		if most > 0 && l.problems() == before {
			r.Allotment = most
			r.Algorithm = Allotted(r.Algorithm, most)
		}
	}
	if l.problems() != before {
		return nil
	}
	return r
}

// withBurst returns lim with the configured burst, if set, after checking
// that alg honours a burst and can decide under the result.
func (l *loader) withBurst(lim core.Limit, alg core.Algorithm, burstSet bool, burst int64, line int, ctx string) core.Limit {
	if burstSet {
		if !bucket(alg) {
			l.errorf(line, ctx, "burst applies only to the token-bucket and gcra algorithms, not %s", alg.Name())
			return lim
		}
		lim = lim.WithBurst(burst)
	}
	err := lim.Validate()
	if err == nil {
		err = alg.Validate(lim)
	}
	if err != nil {
		l.errorf(line, ctx, "invalid limit: %s", strings.TrimPrefix(err.Error(), core.ErrInvalidLimit.Error()+": "))
	}
	return lim
}

// bucket reports whether alg honours a limit's burst: the bucket
// algorithms do, and they are the ones that reserve ([core.Reserver]);
// the window algorithms take no notice of it.
func bucket(alg core.Algorithm) bool {
	r, ok := core.AlgorithmAs[core.Reserver](alg)
	return ok && r.Reserves()
}
