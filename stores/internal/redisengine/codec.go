package redisengine

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores"
)

// DefaultPrefix starts every key a Redis store writes unless its
// configuration names another prefix.
const DefaultPrefix = "sluice:"

// MaxPrefixLen is the longest prefix a store accepts, in bytes.
const MaxPrefixLen = 128

// maxTag is the longest escaped key kept as it is; longer keys are stored
// by their SHA-256, so that no key costs Redis more than about 200 bytes.
const maxTag = 128

// Prefix returns the prefix a store configured with prefix uses:
// [DefaultPrefix] for "", else prefix itself, unless it has a brace, which
// would make part of it a hash tag and send every key to one Cluster slot,
// or is longer than [MaxPrefixLen].
func Prefix(prefix string) (string, error) {
	switch {
	case prefix == "":
		return DefaultPrefix, nil
	case strings.ContainsAny(prefix, "{}"):
		return "", fmt.Errorf("prefix %q contains a brace: every key would share its hash tag, and one Cluster slot", prefix)
	case len(prefix) > MaxPrefixLen:
		return "", fmt.Errorf("prefix is %d bytes, longer than %d", len(prefix), MaxPrefixLen)
	}
	return prefix, nil
}

// AppendKey appends to dst the Redis key of key's state under alg:
//
//	prefix + "{" + tag + "}:" + alg
//
// The braces make tag the key's Redis Cluster hash tag, so a key's state
// has one slot and different keys spread over all of them. The tag is key
// with '%', '{' and '}' escaped as %25, %7B and %7D, so that no key can
// pick another's tag (and slot) by holding braces; an escaped key longer
// than 128 bytes is replaced by "%h" and the hex SHA-256 of key, which no
// escaped key can equal. The prefix must have come from [Prefix].
func AppendKey(dst []byte, prefix, key, alg string) []byte {
	dst = append(dst, prefix...)
	dst = append(dst, '{')
	if n := keyEscaper.Len(key); n <= maxTag {
		dst = keyEscaper.Append(dst, key)
	} else {
		sum := sha256.Sum256([]byte(key))
		dst = append(dst, "%h"...)
		dst = hex.AppendEncode(dst, sum[:])
	}
	dst = append(dst, "}:"...)
	return append(dst, alg...)
}

// Key returns the Redis key of key's state under alg (see [AppendKey]).
func Key(prefix, key, alg string) string {
	return string(AppendKey(make([]byte, 0, len(prefix)+len(key)+len(alg)+8), prefix, key, alg))
}

// keyEscaper escapes a user's key in its hash tag: '%', '{' and '}'.
var keyEscaper = stores.NewEscaper("{}")

// ArgsLen is the length in bytes of the packed request, ARGV[1].
const ArgsLen = 10 * 8

// AppendArgs appends the packed request ARGV[1] for req to dst: ten
// little-endian doubles, exact because each is an integer below 2^53 (see
// [algorithms.Script]). The request must have passed [core.Request.Validate]
// and its limit must not be [core.Inf].
func AppendArgs(dst []byte, req *core.Request) []byte {
	now := int64(-1) // the server's clock
	if !req.Now.IsZero() {
		now = req.Now.UnixMicro()
	}
	st := req.Step(now)
	op := int64(st.Op)
	if req.Op == core.OpAtMost {
		op = opAtMost // decided in two passes by the prelude
	}
	l := req.Limit
	u, r := l.Units()
	for _, v := range [...]int64{now, req.Cost, op, l.Rate(), l.PeriodMicros(), l.Burst(), u, r, st.Debt, st.Lease} {
		dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(float64(v)))
	}
	return dst
}

// opAtMost is a partial admission's operation in a packed request
// (prelude.lua).
const opAtMost = 3

// ReplyLen is the number of integers in a script's reply.
const ReplyLen = 10

// ReplySize is the length in bytes of one decision's packed reply: ten
// little-endian doubles.
const ReplySize = ReplyLen * 8

// The flags of a reply's first integer (conclude.lua).
const (
	flagAllowed = 1 // the request was admitted
	flagHealed  = 2 // the key held a value sluice could not read (core.Decision.Healed)
)

// ErrMalformed reports a script reply that breaks the calling convention:
// not ten packed integers, or numbers no decision can hold. A store wraps it
// with what it received.
var ErrMalformed = errors.New("malformed script reply")

// ErrNoReply is the error of a script call that got a nil reply.
var ErrNoReply = fmt.Errorf("%w: no reply", ErrMalformed)

// decodeOne checks one decision's packed reply and returns the decision
// it holds.
func decodeOne(reply string) (core.Decision, error) {
	if len(reply) != ReplySize {
		return core.Decision{}, fmt.Errorf("%w: %d bytes", ErrMalformed, len(reply))
	}
	return Decode(reply)
}

// Unpack reads one decision's packed reply, reply[:ReplySize]: ten
// little-endian doubles, each of which must be an integer.
func Unpack(reply string) ([ReplyLen]int64, error) {
	var ints [ReplyLen]int64
	if len(reply) < ReplySize {
		return ints, fmt.Errorf("%w: %d bytes, want %d", ErrMalformed, len(reply), ReplySize)
	}
	for i := range ints {
		b := reply[8*i : 8*i+8]
		f := math.Float64frombits(uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
			uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56)
		if !(f >= -core.MaxExact && f <= core.MaxExact) || f != math.Trunc(f) {
			return ints, fmt.Errorf("%w: number %d is %v", ErrMalformed, i, f)
		}
		ints[i] = int64(f)
	}
	return ints, nil
}

// Decode checks one decision's packed reply, reply[:ReplySize], and
// returns the decision it holds.
func Decode(reply string) (core.Decision, error) {
	ints, err := Unpack(reply)
	if err != nil {
		return core.Decision{}, err
	}
	return Decision(ints)
}

// Decision checks a script's reply, read as integers, and returns the
// decision it holds.
func Decision(reply [ReplyLen]int64) (core.Decision, error) {
	flags, limit, remaining, retry, reset, delay := reply[0], reply[1], reply[2], reply[3], reply[4], reply[5]
	at, units, per, admitted := reply[6], reply[7], reply[8], reply[9]
	allowed := flags & flagAllowed
	switch {
	case flags < 0 || flags > flagAllowed|flagHealed:
		return core.Decision{}, fmt.Errorf("%w: flags are %d", ErrMalformed, flags)
	case limit < 0 || limit > core.MaxUnits, remaining < 0 || remaining > core.MaxUnits:
		return core.Decision{}, fmt.Errorf("%w: limit %d, remaining %d", ErrMalformed, limit, remaining)
	case retry < -1 || retry > core.MaxUnits || reset < 0 || reset > core.MaxUnits:
		return core.Decision{}, fmt.Errorf("%w: retry-after %dµs, reset-after %dµs", ErrMalformed, retry, reset)
	case allowed == 1 && retry != 0:
		return core.Decision{}, fmt.Errorf("%w: allowed with retry-after %dµs", ErrMalformed, retry)
	case delay < 0 || delay > core.MaxUnits || allowed == 0 && delay != 0:
		return core.Decision{}, fmt.Errorf("%w: delay %dµs (allowed %d)", ErrMalformed, delay, allowed)
	case at < 0 || at > core.MaxExact:
		return core.Decision{}, fmt.Errorf("%w: instant %dµs", ErrMalformed, at)
	case per < 0 || per > core.MaxExact || units < -core.MaxExact || units > core.MaxExact || per == 0 && units != 0:
		return core.Decision{}, fmt.Errorf("%w: level %d/%d", ErrMalformed, units, per)
	case admitted < 0 || admitted > core.MaxUnits || allowed == 0 && admitted != 0:
		return core.Decision{}, fmt.Errorf("%w: admitted %d (allowed %d)", ErrMalformed, admitted, allowed)
	}
	d := core.Decision{
		Allowed:    allowed == 1,
		Limit:      limit,
		Remaining:  remaining,
		RetryAfter: time.Duration(retry) * time.Microsecond,
		ResetAfter: time.Duration(reset) * time.Microsecond,
		Delay:      time.Duration(delay) * time.Microsecond,
		At:         time.UnixMicro(at).UTC(),
		Level:      core.Level{Units: units, PerToken: per},
		Admitted:   admitted,
		Healed:     flags&flagHealed != 0,
	}
	if retry == -1 {
		d.RetryAfter = core.RetryNever
	}
	return d, nil
}

// Script validates req and returns the Lua twin of its algorithm, or nil
// for a request under [core.Inf], which a store allows without a call. It
// fails with the request's validation error, or one wrapping
// [core.ErrUnsupported] for an algorithm without a twin.
func Script(req *core.Request) (*algorithms.Script, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return scriptOf(req)
}

// scriptOf is [Script] for a request validated already.
func scriptOf(req *core.Request) (*algorithms.Script, error) {
	if req.Limit.IsInf() {
		return nil, nil
	}
	if script := algorithms.ScriptOf(req.Algorithm); script != nil {
		return script, nil
	}
	return nil, fmt.Errorf("%w: algorithm %q has no Lua twin (algorithms.Scripted)", core.ErrUnsupported, req.Algorithm.Name())
}

// algBytes holds each MultiIndex as a one-byte string.
const algBytes = "\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f"

// Alg returns algorithms.MultiScript's ARGV[2] for one request whose
// algorithm has the MultiIndex idx (below 16): one byte.
func Alg(idx int) string { return algBytes[idx : idx+1] }

// appendGroup appends to dst algorithms.MultiScript's ARGV[3] for one
// group of n requests: a 1, then n-1 zeros.
func appendGroup(dst []byte, n int) []byte {
	dst = append(dst, 1)
	for range n - 1 {
		dst = append(dst, 0)
	}
	return dst
}

// Merge gathers the arguments of one call of algorithms.MultiScript that
// decides the requests of several callers in turn, a group each: each
// group all or nothing, a later group seeing an earlier one's writes. The
// keys, one a request in the same order, are the caller's to send. The
// zero Merge is empty.
type Merge struct {
	packed, algs, groups []byte
}

// Grow makes room for n more requests, so that adding them allocates
// nothing.
func (m *Merge) Grow(n int) {
	m.packed = slices.Grow(m.packed, n*ArgsLen)
	m.algs = slices.Grow(m.algs, n)
	m.groups = slices.Grow(m.groups, n)
}

// Add adds a group: its requests packed by [AppendArgs] one after another,
// and their algorithms, a byte each ([Alg]).
func (m *Merge) Add(packed, algs string) {
	m.packed = append(m.packed, packed...)
	m.algs = append(m.algs, algs...)
	m.groups = appendGroup(m.groups, len(algs))
}

// Len returns the number of requests added.
func (m *Merge) len() int { return len(m.algs) }

// Args returns the call's ARGV: the packed requests, their algorithms and
// the groups. The strings share the merge's memory, so nothing may be
// added after.
func (m *Merge) Args() (packed, algs, groups string) {
	if m.len() == 0 {
		return "", "", ""
	}
	return unsafe.String(&m.packed[0], len(m.packed)), unsafe.String(&m.algs[0], len(m.algs)), unsafe.String(&m.groups[0], len(m.groups))
}

// Check checks the length of a reply of algorithms.MultiScript for n
// requests: one packed reply a request.
func check(reply string, n int) error {
	if len(reply) != n*ReplySize {
		return fmt.Errorf("%w: %d bytes for %d decisions", ErrMalformed, len(reply), n)
	}
	return nil
}

// Cut returns the first n requests' part of a checked reply of
// algorithms.MultiScript, and the rest.
func cut(reply string, n int) (part, rest string) {
	return reply[:n*ReplySize], reply[n*ReplySize:]
}

// oneGroup is the ARGV[3] of a call of one group of up to 128 requests.
var oneGroup = "\x01" + strings.Repeat("\x00", 127)

// Group returns algorithms.MultiScript's ARGV[3] for a call of one group
// of n requests.
func group(n int) string {
	if n <= len(oneGroup) {
		return oneGroup[:n]
	}
	return string(appendGroup(nil, n))
}

// batch is what a call of algorithms.MultiScript is made of: a stack's
// (see [Call.together]) or the merged calls of a round (see
// [Call.build]). A call keeps it when it is freed, its slices emptied, so
// that the next call on it allocates nothing.
type batch struct {
	keys    []string // the requests' Redis keys, strings of kb (a merged call's: of its calls')
	kb      []byte   // the keys' bytes
	merge   Merge    // the packed requests and their algorithms (a merged call's groups too)
	at      []int    // a stack's requests' positions in the stack
	members []*Call  // a merged call's calls
}

// maxKept bounds the bytes of a batch a freed call keeps: a call that
// carried a larger one (a stack of many rules, or of long keys) lets its
// buffers go.
const maxKept = 16 << 10

// reset empties b for the next call, or drops buffers beyond maxKept.
func (b *batch) reset() {
	if cap(b.kb)+cap(b.merge.packed) > maxKept {
		*b = batch{}
		return
	}
	clear(b.keys) // the strings of a call answered
	clear(b.members)
	b.keys, b.kb, b.at, b.members = b.keys[:0], b.kb[:0], b.at[:0], b.members[:0]
	b.merge = Merge{b.merge.packed[:0], b.merge.algs[:0], b.merge.groups[:0]}
}

// together prepares reqs to be decided in one call of
// algorithms.MultiScript, c: the keys of the requests that need the
// store, their packed requests one after another, one byte per request
// naming its algorithm, and the requests' positions in reqs (c.batch.at);
// it writes the decisions of requests under [core.Inf] to out. It
// reports false, out untouched, when the requests cannot be decided in
// one call: an algorithm has no twin in the script, or, on a Redis
// Cluster (cluster set), the keys are not one user key (and so not one
// slot). The requests must have passed [stores.ValidateAll]; c must be
// empty, or freed, and its strings are its batch's bytes, not written
// again until c has been answered.
func (c *Call) together(prefix string, reqs []core.Request, out []core.Decision, cluster bool) bool {
	b := &c.batch
	size := 0
	for i := range reqs {
		size += len(prefix) + 3*len(reqs[i].Key) + len(reqs[i].Algorithm.Name()) + 4 // escaped at worst
	}
	// Grown once here: a key's string is of the buffer it was appended to.
	b.kb = slices.Grow(b.kb, size)
	m := &b.merge
	m.packed = slices.Grow(m.packed, len(reqs)*ArgsLen)
	for i := range reqs {
		r := &reqs[i]
		if r.Limit.IsInf() {
			continue
		}
		idx := algorithms.MultiIndex(r.Algorithm)
		if idx == 0 || cluster && r.Key != reqs[0].Key {
			return false
		}
		start := len(b.kb)
		b.kb = AppendKey(b.kb, prefix, r.Key, r.Algorithm.Name())
		b.keys = append(b.keys, unsafe.String(&b.kb[start], len(b.kb)-start))
		m.packed = AppendArgs(m.packed, r)
		m.algs = append(m.algs, byte(idx))
		b.at = append(b.at, i)
	}
	for i := range reqs {
		if reqs[i].Limit.IsInf() {
			out[i] = reqs[i].Answer(core.Unlimited())
		}
	}
	if len(b.at) == 0 {
		return true
	}
	// One group: the strings of the merge's bytes, not written again
	// until the call has been answered.
	m.groups = appendGroup(m.groups, len(m.algs))
	packed, algs, groups := m.Args()
	c.Keys, c.script, c.algs = b.keys, algorithms.MultiScript(), algs
	c.args = [3]string{packed, algs, groups}
	c.Args = c.args[:]
	return true
}

// Place checks the reply of algorithms.MultiScript, one packed reply a
// request, for the requests at the positions at (from [together]) and
// writes their decisions to out.
func Place(reply string, at []int, out []core.Decision) error {
	if err := check(reply, len(at)); err != nil {
		return err
	}
	for j, i := range at {
		d, err := Decode(reply[j*ReplySize:])
		if err != nil {
			return fmt.Errorf("decision %d: %w", i, err)
		}
		out[i] = d
	}
	return nil
}
