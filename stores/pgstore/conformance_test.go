package pgstore_test

import (
	"testing"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/stores/layered"
	"github.com/sluicehq/sluice/stores/pgstore/pgtest"
	"github.com/sluicehq/sluice/stores/storetest"
	"github.com/sluicehq/sluice/telemetry"
)

// TestConformance runs the conformance suite on the store, every subtest
// on a table of its own in one server.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, store(newPool(t, pgtest.Start(t))))
}

// TestConformanceThroughChain runs the conformance suite on the
// production chain over the store, as internal/composetest does over the
// Redis stores:
//
//	telemetry → policy → breaker → layered → Counter → pgstore
//
// The breaker's deadline is far above any call on a loaded machine: the
// suite wants every decision from the store.
func TestConformanceThroughChain(t *testing.T) {
	t.Parallel()
	newBackend := store(newPool(t, pgtest.Start(t)))
	storetest.Run(t, func(t *testing.T) core.Store {
		cache, err := layered.New(storetest.NewCounter(newBackend(t)), layered.Config{})
		if err != nil {
			t.Fatal(err)
		}
		breaker, err := policy.NewBreaker(cache, policy.WithTimeout(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		pol, err := policy.New(breaker,
			policy.WithAllowList(func(key string) bool { return key == "pgstore:internal" }),
			policy.WithDenyList(func(key string) bool { return key == "pgstore:banned" }),
		)
		if err != nil {
			t.Fatal(err)
		}
		tel, err := telemetry.New(pol,
			telemetry.WithTracerProvider(tracenoop.NewTracerProvider()),
			telemetry.WithMeterProvider(metricnoop.NewMeterProvider()),
		)
		if err != nil {
			t.Fatal(err)
		}
		return tel
	})
}
