package limits

import (
	"strings"
	"sync/atomic"
)

// node is a descriptor, or a domain's root. Children are found by their
// composite key, as the rate limit service finds them: the descriptor's
// key, joined with "_" to its value if it has one. So {key: a, value: b_c}
// and {key: a_b, value: c} are one composite key, "a_b_c", and declaring
// both is an error; and a request entry (a, b_c) finds a descriptor
// (a_b, c). Reproducing that is what makes a peer's file mean the same
// here.
type node struct {
	children map[string]*node
	// wildcards are the children whose composite key ends in "*", in the
	// order declared: a request value is tried against each in turn, the
	// first whose prefix it has winning.
	wildcards []wildcard
	rule      *Rule
	// valueToMetric and shareThreshold are the descriptor's flags, which
	// apply whether or not it has a rule.
	valueToMetric, shareThreshold bool
	file                          string
	line                          int
	// keyMetric is the stats name of a match that found this descriptor
	// and each of its ancestors by key alone, which their keys make
	// whatever the request's values: made by the first such match.
	keyMetric atomic.Pointer[string]
}

// wildcard is a child whose composite key ends in "*".
type wildcard struct {
	composite string // with the *
	prefix    string // without it
	node      *node
}

// add makes c the child of n at composite.
func (n *node) add(composite string, c *node) {
	if n.children == nil {
		n.children = make(map[string]*node)
	}
	n.children[composite] = c
	if p, ok := strings.CutSuffix(composite, "*"); ok {
		n.wildcards = append(n.wildcards, wildcard{composite: composite, prefix: p, node: c})
	}
}

// how says how a request entry found a descriptor.
type how uint8

const (
	byValue    how = iota + 1 // the composite key key_value
	byWildcard                // a wildcard the composite key begins with
	byKey                     // the key alone: the key's default
)

// step is one entry's match.
type step struct {
	node *node
	wild *wildcard // the wildcard matched, when byWildcard
	how  how
}

// share returns the pattern that stands for entry e's value in keys and
// metrics, if it matched a wildcard with share_threshold along st, else
// "". It is the wildcard's composite key less e's key and "_", as the
// rate limit service computes it: "files/*" for key files, value
// files/*.
func (st step) share(e Entry) string {
	if st.how != byWildcard || !st.node.shareThreshold {
		return ""
	}
	return trimKey(st.wild.composite, e.Key)
}

// maxComposite is the longest composite key a descriptor can have. A
// request entry whose key_value is longer matches none by value, which
// lets find build key_value in a buffer on its stack.
const maxComposite = maxKeyLen + 1 + maxValueLen

// find finds the child of n that entry e matches: by key_value, else by
// the first wildcard key_value begins with, else by key alone. It builds
// key_value in buf.
func (n *node) find(e Entry, buf *[maxComposite]byte) step {
	if len(e.Key)+1+len(e.Value) <= maxComposite {
		b := append(append(append(buf[:0], e.Key...), '_'), e.Value...)
		if c := n.children[string(b)]; c != nil { // no allocation: the compiler sees the conversion is for a lookup
			return step{node: c, how: byValue}
		}
	}
	for i := range n.wildcards {
		if w := &n.wildcards[i]; hasPrefix(e.Key, e.Value, w.prefix) {
			return step{node: w.node, wild: w, how: byWildcard}
		}
	}
	if c := n.children[e.Key]; c != nil {
		return step{node: c, how: byKey}
	}
	return step{}
}

// hasPrefix reports whether key+"_"+value begins with p, without building
// it.
func hasPrefix(key, value, p string) bool {
	if len(p) <= len(key) {
		return key[:len(p)] == p
	}
	if key != p[:len(key)] || p[len(key)] != '_' {
		return false
	}
	return strings.HasPrefix(value, p[len(key)+1:])
}

// trimKey returns s less the prefix key+"_", if it has it.
func trimKey(s, key string) string {
	if len(s) > len(key) && s[len(key)] == '_' && s[:len(key)] == key {
		return s[len(key)+1:]
	}
	return s
}

// Match finds the rule for a request descriptor of domain: its entries,
// in order, walk the domain's tree of descriptors, each finding a
// descriptor among the children of the last by key_value, else by the
// first wildcard (a value ending in "*") whose prefix key_value has, else
// by its key alone. A rule applies only if the request's last entry finds
// a descriptor with a rate_limit. A request with fewer entries than the
// tree is deep so matches the rule of an inner descriptor; one with more
// matches nothing, as the walk stops at a descriptor without children.
// This is the rate limit service's GetLimit, exactly, as are the Key and
// Metric it returns ([Match]).
//
// Match allocates only the two strings it returns, and the Metric only
// where it holds a request's value (else the first time); it returns
// the zero Match, allocating nothing, when no rule applies.
func (s *Set) Match(domain string, entries []Entry) Match {
	if s == nil || len(entries) == 0 {
		return Match{}
	}
	n := s.domains[domain]
	if n == nil {
		return Match{}
	}
	var path [MaxDepth]step
	var buf [maxComposite]byte
	last := len(entries) - 1
	for i, e := range entries {
		if i == MaxDepth {
			return Match{} // unreachable: no descriptor is this deep
		}
		st := n.find(e, &buf)
		switch {
		case st.node == nil:
			return Match{}
		case i < last && len(st.node.children) == 0:
			return Match{} // more entries than the tree is deep
		}
		path[i] = st
		n = st.node
	}
	steps := path[:len(entries)]
	r := steps[last].node.rule
	if r == nil {
		return Match{}
	}
	return Match{Rule: r, Key: stateKey(domain, entries, steps), Metric: metric(domain, entries, steps, r)}
}

// metric returns the stats name of the rule r that entries matched along
// steps, as the rate limit service names it:
//
//   - under detailed_metric, each entry as key_value, but key_pattern for
//     an entry matched by a share_threshold wildcard, and the key alone
//     for an empty value when any entry was so matched;
//   - otherwise each entry as the key, with "_" and a value if the
//     descriptor it found gives one: the wildcard's pattern if it has
//     share_threshold; the request's value if found by value, or by a
//     descriptor with value_to_metric; the wildcard as configured
//     otherwise.
func metric(domain string, entries []Entry, steps []step, r *Rule) string {
	byKeys := !r.DetailedMetric
	for _, st := range steps {
		byKeys = byKeys && st.how == byKey && !st.node.valueToMetric
	}
	if byKeys {
		leaf := steps[len(steps)-1].node
		if m := leaf.keyMetric.Load(); m != nil {
			return *m
		}
		m := joinMetric(domain, entries, func(int) (string, bool) { return "", false })
		leaf.keyMetric.Store(&m)
		return m
	}
	shared := false
	for i, st := range steps {
		shared = shared || st.share(entries[i]) != ""
	}
	part := func(i int) (value string, sep bool) {
		e, st := entries[i], steps[i]
		share := st.share(e)
		if r.DetailedMetric {
			switch {
			case !shared:
				return e.Value, true
			case share != "":
				return share, true
			}
			return e.Value, e.Value != ""
		}
		switch st.how {
		case byWildcard:
			switch {
			case share != "":
				value = share
			case st.node.valueToMetric:
				value = e.Value
			default:
				value = trimKey(st.wild.composite, e.Key)
			}
		case byValue:
			value = e.Value
		case byKey:
			if st.node.valueToMetric {
				value = e.Value
			}
		}
		return value, value != ""
	}
	return joinMetric(domain, entries, part)
}

// OverrideMetric returns the stats name of a descriptor limited by an
// override (Envoy's limit: in a rate limit action), as the rate limit
// service names it: the domain, then each entry as key_value, or the key
// alone for an empty value.
func OverrideMetric(domain string, entries []Entry) string {
	return joinMetric(domain, entries, func(i int) (string, bool) { return entries[i].Value, entries[i].Value != "" })
}

// joinMetric joins domain and entries into a stats name: each entry's key
// after a ".", and, where part says so, "_" and the value part gives.
func joinMetric(domain string, entries []Entry, part func(i int) (value string, sep bool)) string {
	size := len(domain)
	for i, e := range entries {
		v, sep := part(i)
		size += 1 + len(e.Key) + len(v)
		if sep {
			size++
		}
	}
	var b strings.Builder
	b.Grow(size)
	b.WriteString(domain)
	for i, e := range entries {
		v, sep := part(i)
		b.WriteByte('.')
		b.WriteString(e.Key)
		if sep {
			b.WriteByte('_')
			b.WriteString(v)
		}
	}
	return b.String()
}
