package algorithms

import (
	"crypto/sha1"
	"encoding/hex"

	"github.com/sluicehq/sluice/core"
)

// Script is the Lua twin of an algorithm's transition: the same decision
// in the same integer arithmetic, run atomically inside Redis by the Redis
// stores (packages redisstore and rueidisstore). An algorithm offers its
// twin by implementing [Scripted]; this package's algorithms all do. It
// is the Redis stores' calling convention, and concerns only those who
// write an algorithm with a Lua twin of its own.
//
// Every script follows one calling convention, so that stores encode
// requests and parse replies without knowing the algorithm:
//
//   - KEYS[1] is the key's state, the only key the script touches (so every
//     script is Redis Cluster safe).
//   - ARGV[1] is the request: ten little-endian IEEE 754 doubles, each an
//     integer below 2^53 and so exact, read with struct.unpack: the instant
//     to decide at in µs since the Unix epoch (−1 for the server's TIME),
//     the cost, the [core.Op] (0 charge, 1 peek, 2 refund, 3 a partial
//     admission of at most the cost, which the shared prelude decides in
//     two passes, as [core.Run] does), then the limit's rate, period in
//     µs, burst, units per token and per µs (see [core.Limit.Units]), the
//     [core.Step] Debt a reservation may run to, and the Lease of a
//     concurrency lease (0 if none).
//   - The reply is one string of ten little-endian IEEE 754 doubles, each
//     an integer below 2^53, as struct.pack('<dddddddddd', ...) makes it:
//     flags (1 allowed, plus 2 if the key held a value the script could
//     not read and decided as a missing key, see [core.Decision]'s
//     Healed), limit, remaining, retry-after in µs (−1 for
//     [core.RetryNever]), reset-after in µs, the delay of a reservation in
//     µs (see [core.Decision]'s Delay), the decision's instant in µs since
//     the Unix epoch (the later of the request's and the key's last
//     charge, [core.Decision]'s At), the level after the decision in units
//     and the units per token ([core.Level]; 0 and 0 for none), and the
//     cost a partial admission admitted (0 for every other operation).
//     One string costs the server and the client less than an array of
//     ten integers.
//
// A script that writes leaves the key a TTL no shorter than the time the
// state matters (its Expires, see [core.State]) plus a margin, and no
// longer than that plus a second; a key's value records the expiry it
// was last given, so that a write the expiry covers keeps it (SET …
// KEEPTTL, a plain write) rather than setting it again (conclude.lua).
//
// One packed argument rather than ten decimal ones saves the server ten
// number conversions and the client ten allocations per decision.
type Script struct {
	src, hash string
	portable  *Script
}

// NewScript returns the script whose Lua source is src.
func NewScript(src string) *Script {
	s := newScript(src)
	s.portable = newScript(portableLua + src)
	s.portable.portable = s.portable
	return s
}

func newScript(src string) *Script {
	sum := sha1.Sum([]byte(src))
	return &Script{src: src, hash: hex.EncodeToString(sum[:])}
}

// Portable returns the script's portable form, for a server whose Lua has
// no struct library (miniredis): the same script after a definition of
// struct.pack and struct.unpack, for the formats of the calling
// convention, in plain Lua. It decides as the script does, bit for bit,
// at a cost Redis itself never pays: the Redis stores send it only to a
// server that answered the script itself with an error naming the missing
// struct (see docs/redis.md). The portable form of a portable form is
// itself.
func (s *Script) Portable() *Script { return s.portable }

// Source returns the script's Lua source, as EVAL takes it.
func (s *Script) Source() string { return s.src }

// Hash returns the SHA-1 of the source in lowercase hex, as EVALSHA takes
// it.
func (s *Script) Hash() string { return s.hash }

// Scripted is implemented by algorithms that have a Lua twin. Redis stores
// run only such algorithms; memstore needs no script.
type Scripted interface {
	core.Algorithm
	// Script returns the algorithm's Lua twin, the same *Script on every
	// call; nil when the algorithm has none after all (a wrapper around
	// an algorithm without a twin).
	Script() *Script
}

// ScriptOf returns alg's Lua twin, or nil if it has none: alg is not
// [Scripted] and wraps no algorithm that is (see [core.AlgorithmAs], which
// looks through a stack's [core.Named] rules).
func ScriptOf(alg core.Algorithm) *Script {
	if s, ok := core.AlgorithmAs[Scripted](alg); ok {
		return s.Script()
	}
	return nil
}
