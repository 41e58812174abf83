package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/sluicehq/sluice/core"
)

// Breaker is implemented by a store with a circuit breaker, such as the
// breaker of package policy. [New] looks for one in the chain it wraps,
// from the outside in ([core.Chain]); if it
// finds one, spans carry its state ([BreakerStateKey]) and two observable
// instruments report it: ratelimit.breaker.state and
// ratelimit.breaker.changes.
//
// Both methods must be safe for concurrent use and cheap: BreakerState is
// called once per recorded span and at every metric collection.
type Breaker interface {
	// BreakerState returns the breaker's state: "closed", "half-open" or
	// "open".
	BreakerState() string
	// BreakerChanges returns how many times the state has changed since
	// the breaker was made; it never decreases.
	BreakerChanges() uint64
}

// The states of a [Breaker], the values of [BreakerStateKey].
const (
	BreakerClosed   = "closed"
	BreakerHalfOpen = "half-open"
	BreakerOpen     = "open"
)

// findBreaker returns the outermost [Breaker] in the chain from s inward,
// or nil.
func findBreaker(s core.Store) Breaker {
	for st := range core.Chain(s) {
		if b, ok := st.(Breaker); ok {
			return b
		}
	}
	return nil
}

// backend returns the innermost store of the chain from s.
func backend(s core.Store) core.Store {
	for st := range core.Chain(s) {
		s = st
	}
	return s
}

// breakerMetrics registers the observable instruments of b on meter, and
// returns their registration (nil when instruments could not be made).
func breakerMetrics(meter metric.Meter, b Breaker, base []attribute.KeyValue) (metric.Registration, error) {
	state, err := meter.Int64ObservableGauge("ratelimit.breaker.state",
		metric.WithUnit("{state}"),
		metric.WithDescription("1 for the circuit breaker's current state (attribute ratelimit.breaker.state), 0 for the others."))
	if err != nil {
		return nil, err
	}
	changes, err := meter.Int64ObservableCounter("ratelimit.breaker.changes",
		metric.WithUnit("{change}"),
		metric.WithDescription("State changes of the circuit breaker."))
	if err != nil {
		return nil, err
	}
	states := [...]string{BreakerClosed, BreakerHalfOpen, BreakerOpen}
	var stateOpts [len(states)][]metric.ObserveOption
	for i, s := range states {
		kvs := append(append([]attribute.KeyValue(nil), base...), BreakerStateKey.String(s))
		stateOpts[i] = []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(kvs...))}
	}
	changeOpts := []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(base...))}
	return meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		current := b.BreakerState()
		for i, s := range states {
			var v int64
			if s == current {
				v = 1
			}
			o.ObserveInt64(state, v, stateOpts[i]...)
		}
		o.ObserveInt64(changes, int64(min(b.BreakerChanges(), 1<<63-1)), changeOpts...)
		return nil
	}, state, changes)
}
