package sluice

import (
	"time"

	"github.com/sluicehq/sluice/core"
)

// The values a program names are those of the contracts, in package
// core, where stores and algorithms take and return them; these names
// make them reachable from here, so that a program imports sluice alone.
// Each is the same type or value as core's: their methods and fields are
// documented there.

// Limit is how much a key may spend and how fast it comes back: a rate
// over a period, and a burst ([core.Limit], whose methods it has).
type Limit = core.Limit

// Decision is a store's answer to one request: whether it was admitted,
// what is left, and when to retry ([core.Decision]).
type Decision = core.Decision

// Level is how much of its limit a key holds, exactly, in fractions of a
// token ([core.Level]).
type Level = core.Level

// Source says what produced a decision: the store, a local cache or an
// outage policy ([core.Source]).
type Source = core.Source

// Store keeps limiter state: memory (stores/memstore), Redis
// (stores/redisstore, stores/rueidisstore) or a chain of decorators over
// one ([core.Store]).
type Store = core.Store

// Algorithm is a rate-limiting algorithm, such as algorithms.TokenBucket
// ([core.Algorithm]).
type Algorithm = core.Algorithm

// Inf is the limit that admits everything ([core.Inf]).
var Inf = core.Inf

// PerSecond returns a limit of n per second with a burst of n.
func PerSecond(n int64) Limit { return core.PerSecond(n) }

// PerMinute returns a limit of n per minute with a burst of n.
func PerMinute(n int64) Limit { return core.PerMinute(n) }

// PerHour returns a limit of n per hour with a burst of n.
func PerHour(n int64) Limit { return core.PerHour(n) }

// PerDay returns a limit of n per day with a burst of n.
func PerDay(n int64) Limit { return core.PerDay(n) }

// Every returns a limit of one per d with a burst of 1.
func Every(d time.Duration) Limit { return core.Every(d) }

// Per returns a limit of n per period with a burst of n ([core.Per]).
func Per(n int64, period time.Duration) Limit { return core.Per(n, period) }

// ParseLimit parses a limit as [Limit.String] and [Limit.MarshalText]
// write it, such as "10/s burst 50" ([core.ParseLimit]).
func ParseLimit(s string) (Limit, error) { return core.ParseLimit(s) }

// RetryNever is a denial's RetryAfter when its cost can never be
// admitted ([Decision.Unsatisfiable]).
const RetryNever = core.RetryNever

// The sources of a decision ([core.Source]).
const (
	SourceStore      = core.SourceStore      // the store ran the algorithm
	SourceCache      = core.SourceCache      // a local cache answered (a cached denial)
	SourceAllotment  = core.SourceAllotment  // tokens taken from the store in advance were spent locally
	SourceFailOpen   = core.SourceFailOpen   // the store failed and the policy allowed
	SourceFailClosed = core.SourceFailClosed // the store failed and the policy denied
	SourceDegraded   = core.SourceDegraded   // the store failed and a local fallback decided
	SourceShadow     = core.SourceShadow     // shadow mode: a denial reported as allowed
	SourceAllowList  = core.SourceAllowList  // the key is on an allow list
	SourceDenyList   = core.SourceDenyList   // the key is on a deny list
)

// The errors of invalid input and of stores, as core defines them
// (the same values, for [errors.Is]).
var (
	ErrInvalidLimit   = core.ErrInvalidLimit   // a limit that cannot be decided with
	ErrInvalidCost    = core.ErrInvalidCost    // a negative cost, or one above 2^52
	ErrInvalidKey     = core.ErrInvalidKey     // an empty key, or one longer than 1024 bytes
	ErrInvalidTime    = core.ErrInvalidTime    // an instant before 1970 or after 2112
	ErrInvalidRequest = core.ErrInvalidRequest // a request that cannot be decided as asked
	ErrNoAlgorithm    = core.ErrNoAlgorithm    // a limiter or rule without an algorithm
	ErrNoStore        = core.ErrNoStore        // a limiter or stack without a store
	ErrClosed         = core.ErrClosed         // a call after the store's Close
	ErrUnsupported    = core.ErrUnsupported    // an operation the store or algorithm cannot do
	ErrUnavailable    = core.ErrUnavailable    // the store failed
	ErrCleanup        = core.ErrCleanup        // a refund or release not confirmed in time
)

// CleanupTimeout bounds each refund or release sluice makes on a
// caller's behalf ([core.CleanupTimeout]).
const CleanupTimeout = core.CleanupTimeout
