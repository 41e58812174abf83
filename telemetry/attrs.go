package telemetry

import (
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"

	"github.com/sluicehq/sluice/core"
)

// The attributes of spans and metrics, in the ratelimit namespace
// (docs/telemetry.md describes each). Metrics carry only [LimiterKey],
// [StoreKey], [AlgorithmKey], [ResultKey], [SourceKey], [OperationKey],
// [BreakerStateKey] and [ErrorTypeKey], whose values come from a small
// fixed set; never a key.
const (
	// LimiterKey is the limiter's name ([WithName]); string.
	LimiterKey = attribute.Key("ratelimit.limiter")
	// AlgorithmKey is the algorithm's name ([core.Algorithm].Name), such
	// as "token-bucket"; string.
	AlgorithmKey = attribute.Key("ratelimit.algorithm")
	// StoreKey is the backend's name ([WithStoreName]); string.
	StoreKey = attribute.Key("ratelimit.store")
	// CostKey is the request's cost; int.
	CostKey = attribute.Key("ratelimit.cost")
	// OperationKey is what the request asks, its [core.Request].Op:
	// "charge" ([core.OpCharge], the usual request), "peek" ([core.OpPeek]:
	// decide, charge nothing), "refund" ([core.OpRefund]: give the cost
	// back), "reserve" ([core.OpReserve]: admit now, act after the
	// decision's Delay) or "at-most" ([core.OpAtMost]: admit as much of
	// the cost as fits); string.
	OperationKey = attribute.Key("ratelimit.operation")
	// AdmittedKey is [core.Decision].Admitted, the cost a partial
	// admission ([core.OpAtMost]) admitted; int, absent for other
	// operations.
	AdmittedKey = attribute.Key("ratelimit.admitted")
	// MaxWaitKey is a reservation's [core.Request].MaxWait in seconds;
	// double, absent for other operations.
	MaxWaitKey = attribute.Key("ratelimit.max_wait")
	// DelayKey is [core.Decision].Delay in seconds, the wait an admitted
	// reservation must keep before it acts; double, absent when zero.
	DelayKey = attribute.Key("ratelimit.delay")
	// RateKey is the request's limit as [core.Limit.String] prints it,
	// such as "10 req/s (burst 50)"; string.
	RateKey = attribute.Key("ratelimit.rate")
	// AllowedKey is the decision; bool.
	AllowedKey = attribute.Key("ratelimit.allowed")
	// DecisionLimitKey is [core.Decision].Limit, the largest cost admitted
	// at once; int.
	DecisionLimitKey = attribute.Key("ratelimit.limit")
	// RemainingKey is [core.Decision].Remaining; int.
	RemainingKey = attribute.Key("ratelimit.remaining")
	// RetryAfterKey is [core.Decision].RetryAfter in seconds, on denials
	// that can be retried; double.
	RetryAfterKey = attribute.Key("ratelimit.retry_after")
	// ResetAfterKey is [core.Decision].ResetAfter in seconds; double.
	ResetAfterKey = attribute.Key("ratelimit.reset_after")
	// UnsatisfiableKey is true on a denial whose cost can never be
	// admitted ([core.Decision.Unsatisfiable]); bool, absent otherwise.
	UnsatisfiableKey = attribute.Key("ratelimit.unsatisfiable")
	// SourceKey says what produced the decision ([core.Source.String]):
	// "store", "cache", "allotment", "fail-open", "fail-closed", "degraded",
	// "shadow", or "other" for a source this package does not know;
	// string.
	SourceKey = attribute.Key("ratelimit.source")
	// ResultKey is a metric's outcome: "allowed", "denied" or "error";
	// string.
	ResultKey = attribute.Key("ratelimit.result")
	// BreakerStateKey is the circuit breaker's state, "closed",
	// "half-open" or "open", when the chain has a [Breaker]; string.
	BreakerStateKey = attribute.Key("ratelimit.breaker.state")
	// KeyHashKey is the request's key hashed under [WithKeyHash]'s secret;
	// string.
	KeyHashKey = attribute.Key("ratelimit.key.hash")
	// KeyKey is the request's key, under [WithRawKey] only; string.
	KeyKey = attribute.Key("ratelimit.key")
	// ErrorTypeKey is the class of a failure, OpenTelemetry's error.type
	// (see [ErrorType]); string.
	ErrorTypeKey = semconv.ErrorTypeKey

	// BatchSizeKey is the number of requests decided together on a
	// batch's span ([Store.ApplyAll]), a stack's rules; int, absent from
	// a single decision's span. The span's other decision attributes
	// ([AlgorithmKey], [AllowedKey], [RemainingKey], ...) describe the
	// batch's binding request ([core.Binding]).
	BatchSizeKey = attribute.Key("ratelimit.batch.size")
	// BindingKey is the index, from 0, of a batch's binding request, the
	// one whose decision the span's decision attributes describe (the
	// rule sluice.Verdict.Binding names): an index into
	// [BatchAlgorithmsKey], [BatchAllowedKey] and [BatchRemainingKey];
	// int, absent when the batch failed.
	BindingKey = attribute.Key("ratelimit.binding")
	// BatchAlgorithmsKey is every request's algorithm in a batch, in
	// order; for a stack's rule the algorithm named after the rule, such
	// as "token-bucket/per-user" ([core.Named]); string slice.
	BatchAlgorithmsKey = attribute.Key("ratelimit.batch.algorithms")
	// BatchAllowedKey is every request's decision in a batch, in order
	// (after a denial, the rules that admitted report what they would
	// have allowed); bool slice, absent when the batch failed.
	BatchAllowedKey = attribute.Key("ratelimit.batch.allowed")
	// BatchRemainingKey is every request's [core.Decision].Remaining in a
	// batch, in order; int slice, absent when the batch failed.
	BatchRemainingKey = attribute.Key("ratelimit.batch.remaining")
)

// The values of [OperationKey].
const (
	OperationCharge  = "charge"
	OperationPeek    = "peek"
	OperationRefund  = "refund"
	OperationReserve = "reserve"
	OperationAtMost  = "at-most"
)

// numOps is the number of operations; operations indexes their names.
const numOps = 5

var operations = [numOps]string{OperationCharge, OperationPeek, OperationRefund, OperationReserve, OperationAtMost}

// operation returns the index in operations of what req asks.
func operation(req *core.Request) int {
	if int(req.Op) < numOps {
		return int(req.Op)
	}
	return 0
}

// The values of [ResultKey].
const (
	ResultAllowed = "allowed"
	ResultDenied  = "denied"
	ResultError   = "error"
)

// numSources is the number of sources telemetry tells apart: core's
// nine, and "other" for any later one.
const numSources = 10

var sourceNames = func() (names [numSources]string) {
	for i := range numSources - 1 {
		names[i] = core.Source(i).String()
	}
	names[numSources-1] = "other"
	return names
}()

func sourceIndex(s core.Source) int { return min(int(s), numSources-1) }

// maxAlgorithms bounds the algorithm names a decorator keeps attribute
// sets for; later names share the set of [otherAlgorithm], so no program
// can grow a metric's series without bound.
const maxAlgorithms = 16

// maxErrorTypes bounds the error.type values per algorithm for the same
// reason; later ones are counted as "_OTHER".
const maxErrorTypes = 16

// otherAlgorithm names, in metrics, the algorithms beyond [maxAlgorithms].
const otherAlgorithm = "_OTHER"

// measure holds a metric attribute set as the options each kind of
// instrument takes, made once so that recording allocates nothing.
type measure struct {
	add []metric.AddOption
	rec []metric.RecordOption
	obs []metric.ObserveOption
}

func newMeasure(kvs ...attribute.KeyValue) measure {
	o := metric.WithAttributeSet(attribute.NewSet(kvs...))
	return measure{add: []metric.AddOption{o}, rec: []metric.RecordOption{o}, obs: []metric.ObserveOption{o}}
}

// algEntry holds the metric attribute sets of one algorithm, made when
// the decorator first sees it.
type algEntry struct {
	name    string
	attrs   []attribute.KeyValue           // the decorator's, and the algorithm
	decided [2][numSources][numOps]measure // [allowed][source][operation]
	failed  [numOps]measure                // [operation]
	// The decisions counted under decided's and failed's sets, which
	// ratelimit.decisions reports at each collection (see Store.record).
	decidedN [2][numSources][numOps]atomic.Int64
	failedN  [numOps]atomic.Int64
	plain    measure // the decorator's attributes and the algorithm: near_limit, healed
	errMu    sync.Mutex
	errs     map[string]measure // by error.type; at most maxErrorTypes
	errOther measure
	policy   atomic.Pointer[policyName] // the last limit's String
}

type policyName struct {
	limit core.Limit
	name  string
}

// observe reports the decisions the entry has counted to o, as inst's
// points: one for each attribute set that has counted any.
func (a *algEntry) observe(o metric.Observer, inst metric.Int64Observable) {
	for allowed := range a.decidedN {
		for src := range a.decidedN[allowed] {
			for op := range a.decidedN[allowed][src] {
				if n := a.decidedN[allowed][src][op].Load(); n > 0 {
					o.ObserveInt64(inst, n, a.decided[allowed][src][op].obs...)
				}
			}
		}
	}
	for op := range a.failedN {
		if n := a.failedN[op].Load(); n > 0 {
			o.ObserveInt64(inst, n, a.failed[op].obs...)
		}
	}
}

// entries is the copy-on-write list of a decorator's algorithm entries.
type entries struct {
	mu    sync.Mutex // held to add one
	list  atomic.Pointer[[]*algEntry]
	other *algEntry // for names beyond maxAlgorithms, made with the list's last
	base  []attribute.KeyValue
}

// each calls f with every entry made so far.
func (e *entries) each(f func(*algEntry)) {
	e.mu.Lock()
	other := e.other
	e.mu.Unlock()
	if p := e.list.Load(); p != nil {
		for _, a := range *p {
			f(a)
		}
	}
	if other != nil {
		f(other)
	}
}

// get returns the entry of the algorithm named name, making it if needed.
func (e *entries) get(name string) *algEntry {
	if p := e.list.Load(); p != nil {
		for _, a := range *p {
			if a.name == name {
				return a
			}
		}
	}
	return e.add(name)
}

func (e *entries) add(name string) *algEntry {
	e.mu.Lock()
	defer e.mu.Unlock()
	var list []*algEntry
	if p := e.list.Load(); p != nil {
		list = *p
	}
	for _, a := range list {
		if a.name == name {
			return a
		}
	}
	if len(list) >= maxAlgorithms {
		if e.other == nil {
			e.other = newAlgEntry(e.base, otherAlgorithm)
		}
		return e.other
	}
	a := newAlgEntry(e.base, name)
	grown := append(list[:len(list):len(list)], a)
	e.list.Store(&grown)
	return a
}

func newAlgEntry(base []attribute.KeyValue, name string) *algEntry {
	a := &algEntry{name: name, errs: make(map[string]measure)}
	a.attrs = append(append(make([]attribute.KeyValue, 0, len(base)+1), base...), AlgorithmKey.String(name))
	with := func(kvs ...attribute.KeyValue) measure {
		all := make([]attribute.KeyValue, 0, len(a.attrs)+len(kvs))
		return newMeasure(append(append(all, a.attrs...), kvs...)...)
	}
	for allowed, result := range [2]string{ResultDenied, ResultAllowed} {
		for src, source := range sourceNames {
			for op, name := range operations {
				a.decided[allowed][src][op] = with(ResultKey.String(result), SourceKey.String(source), OperationKey.String(name))
			}
		}
	}
	for op, name := range operations {
		a.failed[op] = with(ResultKey.String(ResultError), OperationKey.String(name))
	}
	a.plain = with()
	a.errOther = with(semconv.ErrorTypeOther)
	return a
}

// errMeasure returns the attribute set of store errors of type typ.
func (a *algEntry) errMeasure(typ string) measure {
	a.errMu.Lock()
	defer a.errMu.Unlock()
	if m, ok := a.errs[typ]; ok {
		return m
	}
	if len(a.errs) >= maxErrorTypes {
		return a.errOther
	}
	kvs := append([]attribute.KeyValue(nil), a.attrs...)
	m := newMeasure(append(kvs, ErrorTypeKey.String(typ))...)
	a.errs[typ] = m
	return m
}

// rateString returns l.String(), remembering the last limit's.
func (a *algEntry) rateString(l core.Limit) string {
	if p := a.policy.Load(); p != nil && p.limit == l {
		return p.name
	}
	p := &policyName{limit: l, name: l.String()}
	a.policy.Store(p)
	return p.name
}
