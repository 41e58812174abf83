package limits

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"slices"
	"strconv"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/core"
)

// ErrInvalid is wrapped by every problem [Parse] and [Load] find in a
// configuration's content: errors.Is(err, ErrInvalid) tells a bad
// configuration from a file that could not be read.
var ErrInvalid = errors.New("limits: invalid configuration")

// Error is one problem in a configuration: the file, the line (counted
// from 1) and what is wrong. Its text is "file:line: message", as compilers
// write theirs. [Parse] and [Load] return every problem they find, joined
// with [errors.Join]; errors.As finds the first.
type Error struct {
	File string
	Line int
	Msg  string
}

// Error returns "file:line: message".
func (e *Error) Error() string { return e.File + ":" + strconv.Itoa(e.Line) + ": " + e.Msg }

// Unwrap returns [ErrInvalid].
func (e *Error) Unwrap() error { return ErrInvalid }

// File is one configuration document: its name, used in errors and in
// [Rule.File], and its content.
type File struct {
	Name string
	Data []byte
}

// Options for [Parse] and [Load]. The zero value is the peer's default.
type Options struct {
	// MergeDomains lets several files declare the same domain, their
	// top-level descriptors merged into one tree (the rate limit service's
	// MERGE_DOMAIN_CONFIG); a descriptor declared twice is still an error.
	// The default, false, makes a domain declared twice an error.
	MergeDomains bool
	// IgnoreDotFiles makes [Load] skip the files and directories whose
	// names begin with "." (the rate limit service's
	// RUNTIME_IGNOREDOTFILES). The default, false, reads them, as the
	// service does.
	IgnoreDotFiles bool
	// AppDirectory, if set, makes [Load] read a directory as the rate
	// limit service reads its runtime directory with RUNTIME_WATCH_ROOT
	// (its default): only the files whose path below it, with "/" made
	// ".", begins with AppDirectory and a dot (the service's
	// RUNTIME_APPDIRECTORY, "config": config/a.yaml, config.yaml). The
	// default, "", reads every file.
	AppDirectory string
	// Allotment, if above 0, gives every rule that does not say its own
	// (sluice's rate_limit key allotment) allotments of up to Allotment
	// requests ([Rule.Allotment]) when its algorithm can take them
	// (fixed-window, token-bucket, gcra) and its requests_per_unit is at
	// least 100 times Allotment, so that what an instance holds in
	// allotments strands at most a hundredth of the limit. The default, 0,
	// allots only the rules that say so.
	Allotment int64
}

// Warning is something a configuration that loads holds that may not be
// what its author meant: a key given twice in one mapping (the last wins,
// as the rate limit service reads it), or a file [Load] could not read
// (the others load, as the service loads them). Its text is
// "file:line: message", or "file: message" where no line applies (Line 0).
type Warning struct {
	File string
	Line int
	Msg  string
}

// String returns "file:line: message", or "file: message" if Line is 0.
func (w Warning) String() string {
	if w.Line == 0 {
		return w.File + ": " + w.Msg
	}
	return w.File + ":" + strconv.Itoa(w.Line) + ": " + w.Msg
}

// Entry is one key/value of a request descriptor, as Envoy sends it.
type Entry struct {
	Key, Value string
}

// Match is the result of matching one request descriptor ([Set.Match]).
// The zero Match means no limit applies.
type Match struct {
	// Rule is the limit that applies; nil if none does.
	Rule *Rule
	// Key is where the rule's state is kept: [Key] of the domain and the
	// request's entries, with the pattern in place of the value for each
	// entry matched by a share_threshold wildcard, so that every value it
	// matches shares one counter. "" when Rule is nil.
	Key string
	// Metric is the stats name the rate limit service would use for this
	// request, such as "domain.key_value.key": the descriptors' path, each
	// value included or not as detailed_metric, value_to_metric and
	// share_threshold say. "" when Rule is nil.
	Metric string
}

// Rule is one configured limit: a descriptor with a rate_limit. Rules are
// shared by every [Match] that finds them and must not be modified.
type Rule struct {
	// Name is rate_limit.name, "" if none; other rules name it in
	// Replaces.
	Name string
	// Replaces are the names of the rules this one replaces when both
	// apply to one request (rate_limit.replaces).
	Replaces []string
	// Terms are what the rule's requests are decided under, shared by
	// them all. Their Algorithm is fixed-window
	// ([github.com/sluicehq/sluice/algorithms.FixedWindow]), the rate
	// limit service's epoch-aligned window, unless rate_limit.algorithm
	// chose another; never nil. Their Limit is the rate:
	// requests_per_unit per unit (with the configured burst), or the text
	// form's; [core.Inf] when Unlimited, and the zero (invalid) Limit
	// when Deny, so that a store never decides with it.
	core.Terms
	// Unlimited reports rate_limit.unlimited (or limit: unlimited): every
	// request is allowed and no state is kept.
	Unlimited bool
	// Deny reports requests_per_unit 0 (or absent): the rate limit
	// service answers every request OVER_LIMIT, and so does sluice,
	// without asking a store.
	Deny bool
	// Unit is the unit of the response's current_limit. For unit and
	// requests_per_unit it is the configured unit. For the text form
	// (rate_limit.limit) it is the unit equal to the limit's period if
	// there is one (second, minute, hour, day, week, month of 30 days or
	// year of 365 days); else the smallest of those in which the rate is
	// a whole number of requests, at most 2^32−1 ("1/250ms" is 4 a
	// second); else UNKNOWN. UNKNOWN when Unlimited.
	Unit rlsv3.RateLimitResponse_RateLimit_Unit
	// RequestsPerUnit is the rate in Unit: the configured
	// requests_per_unit, or the text form's rate in its Unit (0 when Unit
	// is UNKNOWN).
	RequestsPerUnit uint32
	// Allotment is the most of the rule's budget an instance takes from
	// the store at once and spends locally: 0 for none
	// (rate_limit.allotment, or [Options.Allotment]). An allotted rule's
	// Algorithm is wrapped by [Allotted], under the same name.
	Allotment int64
	// Shadow reports shadow_mode: the rule decides and counts, but never
	// denies.
	Shadow bool
	// DetailedMetric, ValueToMetric and ShareThreshold report the
	// descriptor's detailed_metric, value_to_metric and share_threshold.
	// Match applies them to [Match.Metric] and [Match.Key].
	DetailedMetric, ValueToMetric, ShareThreshold bool
	// Path is the rule's place in the configuration as the rate limit
	// service names it: "domain.key_value.key", each descriptor's key,
	// joined with "_" to its value if it has one.
	Path string
	// File and Line are where the rule's descriptor was declared.
	File string
	Line int
}

// Set is a loaded configuration: the rules of every domain, and how
// request descriptors find them. Build one with [Parse] or [Load]. A Set
// is immutable and safe for concurrent use; the zero Set, and a nil *Set,
// hold no rules.
type Set struct {
	domains  map[string]*node
	names    []string
	rules    int
	allotted int // rules that take allotments
	digest   [32]byte
	// warnings are what loading found that did not stop it.
	warnings []Warning
}

// Warnings returns what loading the set found that did not stop it, in
// the order found: see [Warning]. A server logs them.
func (s *Set) Warnings() []Warning {
	if s == nil {
		return nil
	}
	return slices.Clone(s.warnings)
}

// Domains returns the set's domains, sorted.
func (s *Set) Domains() []string {
	if s == nil {
		return nil
	}
	return slices.Clone(s.names)
}

// HasDomain reports whether the set configures domain.
func (s *Set) HasDomain(domain string) bool {
	if s == nil {
		return false
	}
	_, ok := s.domains[domain]
	return ok
}

// Len returns the number of rules: descriptors with a rate_limit,
// unlimited ones included.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return s.rules
}

// Allotted returns the number of rules that take allotments
// ([Rule.Allotment] above 0).
func (s *Set) Allotted() int {
	if s == nil {
		return 0
	}
	return s.allotted
}

// Digest returns a SHA-256 of what the set was loaded from: the options,
// and each file's name and content, in order. Two sets with the same
// digest hold the same rules, so a reloader can skip a reload that
// changes nothing. A change of a comment changes the digest.
func (s *Set) Digest() [32]byte {
	if s == nil {
		return [32]byte{}
	}
	return s.digest
}

// digest hashes opts and files, each length-prefixed so that no two
// different inputs hash the same bytes.
func digest(opts Options, files []File) [32]byte {
	h := sha256.New()
	var b []byte
	b = append(b, "sluice limits v2\x00"...)
	b = binary.AppendVarint(b, opts.Allotment)
	for _, f := range []bool{opts.MergeDomains, opts.IgnoreDotFiles} {
		if f {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(opts.AppDirectory)))
	b = append(b, opts.AppDirectory...)
	h.Write(b)
	for _, f := range files {
		b = binary.AppendUvarint(b[:0], uint64(len(f.Name)))
		h.Write(b)
		h.Write([]byte(f.Name))
		b = binary.AppendUvarint(b[:0], uint64(len(f.Data)))
		h.Write(b)
		h.Write(f.Data)
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}
