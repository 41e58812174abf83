package telemetry

import (
	"fmt"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Option configures a [Store]. Options are made by the With functions of
// this package; when two options set the same thing, the later one wins.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// keyMode says what a span records of a request's key.
type keyMode uint8

const (
	keyNone keyMode = iota // the default: nothing
	keyHash                // ratelimit.key.hash
	keyRaw                 // ratelimit.key
)

// MinKeySecret is the shortest secret, in bytes, that [WithKeyHash]
// accepts. Keys are often guessable (IPv4 addresses, sequential user
// ids); a short secret would let anyone who reads the traces hash every
// candidate and recover the key.
const MinKeySecret = 16

type config struct {
	roots    bool
	tp       trace.TracerProvider // nil: the global provider
	mp       metric.MeterProvider // nil: the global provider
	limiter  string
	store    string // "": derived from the inner store
	storeSet bool
	keys     keyMode
	secret   []byte
}

// WithTracerProvider sets the provider of the decorator's tracer. The
// default, also used when tp is nil, is the global provider
// ([go.opentelemetry.io/otel.GetTracerProvider]) as it is at each
// decision, so an SDK installed with otel.SetTracerProvider after [New]
// is used from then on.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) { c.tp = tp })
}

// WithMeterProvider sets the provider of the decorator's meter. The
// default, also used when mp is nil, is the global provider
// ([go.opentelemetry.io/otel.GetMeterProvider]), which forwards to an SDK
// installed with otel.SetMeterProvider, even after [New].
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.mp = mp })
}

// WithRootSpans starts a span for every decision, and lets the tracer
// provider's sampler decide whether it records: a decision made outside
// any trace gets a root span of its own. By default a decision's span is
// started only under a span of the caller's that is sampled or records,
// and a decision with none costs no span at all; a root span that the
// sampler drops still costs the SDK its IDs and two allocations
// (docs/telemetry.md, "Which decisions have a span").
func WithRootSpans() Option {
	return optionFunc(func(c *config) { c.roots = true })
}

// WithName names the limiter the decorator serves: the value of the
// ratelimit.limiter attribute on spans and metrics, such as "login" or
// "api-per-user". It must be a fixed name of at most 64 bytes, never
// built from a request. By default, and for an empty name, the attribute
// is absent.
func WithName(name string) Option {
	return optionFunc(func(c *config) { c.limiter = name })
}

// WithStoreName sets the ratelimit.store attribute, 1 to 64 bytes. The
// default is derived from the backend, the innermost store of the chain
// (found through Unwrap): the last element of its type's package path, so
// "memstore", "redisstore" or "rueidisstore" for sluice's stores, and
// "func" for a store that is a function, such as a stores.Func.
func WithStoreName(name string) Option {
	return optionFunc(func(c *config) { c.store, c.storeSet = name, true })
}

// WithKeyHash records, on every span, the request's key hashed with
// HMAC-SHA-256 under secret and truncated to 128 bits: 32 lowercase hex
// digits, in the ratelimit.key.hash attribute. The same key always has the
// same hash under one secret, so the spans of one client can be found
// together, while the key itself cannot be read from them. The secret must
// be at least [MinKeySecret] bytes; [New] copies it. It replaces
// [WithRawKey].
func WithKeyHash(secret []byte) Option {
	s := append([]byte(nil), secret...)
	return optionFunc(func(c *config) { c.keys, c.secret = keyHash, s })
}

// WithRawKey records, on every span, the request's key as it is, in the
// ratelimit.key attribute. Keys are often personal data (user ids, IP
// addresses): use it only where traces may hold them. It replaces
// [WithKeyHash]. Keys never go into metrics, whatever the options.
func WithRawKey() Option {
	return optionFunc(func(c *config) { c.keys, c.secret = keyRaw, nil })
}

// maxName is the longest limiter or store name, in bytes.
const maxName = 64

func (c *config) validate() error {
	switch {
	case len(c.limiter) > maxName:
		return fmt.Errorf("%w: limiter name of %d bytes is longer than %d", ErrInvalidOption, len(c.limiter), maxName)
	case c.storeSet && (c.store == "" || len(c.store) > maxName):
		return fmt.Errorf("%w: store name must be 1 to %d bytes, not %d", ErrInvalidOption, maxName, len(c.store))
	case c.keys == keyHash && len(c.secret) < MinKeySecret:
		return fmt.Errorf("%w: key hash secret of %d bytes is shorter than %d", ErrInvalidOption, len(c.secret), MinKeySecret)
	}
	return nil
}
