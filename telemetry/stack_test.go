package telemetry_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/layered"
	"github.com/sluicehq/sluice/stores/redisstore"
	"github.com/sluicehq/sluice/telemetry"
)

// TestStack traces the whole chain DESIGN.md describes, on a real Redis:
// telemetry → policy's breaker (fail-open) → the layered deny cache →
// redisstore. It checks that a cached denial is marked "cache" and makes
// no Redis call, that while Redis is down decisions are marked
// "fail-open" (never errors), and that the breaker's opening shows on
// spans and in the breaker instruments.
func TestStack(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: time.Second, DialerRetries: 1})
	t.Cleanup(func() { client.Close() })
	h := newProviders(t)
	client.AddHook(clientSpans{h.tp.Tracer("redis")})
	rs, err := redisstore.New(client, redisstore.Config{Prefix: prefix()})
	if err != nil {
		t.Fatal(err)
	}
	cache, err := layered.New(rs, layered.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// A generous per-call deadline: a loaded test machine must not trip
	// the circuit while Redis is up.
	breaker, err := policy.NewBreaker(cache, policy.WithMode(policy.FailOpen), policy.WithTimeout(2*time.Second), policy.WithOpenTimeout(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	h.wrap(t, breaker, telemetry.WithName("stack"))
	lim, err := sluice.NewLimiter(h.store, algorithms.GCRA, core.PerHour(1))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	type want struct {
		allowed bool
		source  string
		redis   bool // an evalsha span under the decision's
		breaker string
	}
	check := func(step string, w want) {
		t.Helper()
		d, err := lim.Allow(ctx, "user:1")
		if err != nil || d.Allowed != w.allowed || d.Source.String() != w.source {
			t.Fatalf("%s: Allow = %+v, %v; want allowed %v from %s", step, d, err, w.allowed, w.source)
		}
		spans := h.ended()
		var decide, cmd int = -1, -1
		for i, s := range spans {
			switch {
			case s.Name() == telemetry.SpanName:
				decide = i
			case evalshaSpan(s.Name()):
				cmd = i
			}
		}
		if decide < 0 {
			t.Fatalf("%s: no decision span in %v", step, names(spans))
		}
		s := spans[decide]
		checkDecisionSpan(t, step, s, s.Status().Code, codes.Unset)
		a := attrs(t, s)
		if a[telemetry.SourceKey] != attribute.StringValue(w.source) || a[telemetry.BreakerStateKey] != attribute.StringValue(w.breaker) ||
			a[telemetry.StoreKey] != attribute.StringValue("redisstore") {
			t.Errorf("%s: source %v, breaker %v, store %v; want %s, %s, redisstore", step,
				a[telemetry.SourceKey].String(), a[telemetry.BreakerStateKey].String(), a[telemetry.StoreKey].String(), w.source, w.breaker)
		}
		switch {
		case w.redis && cmd < 0:
			t.Errorf("%s: no Redis command span", step)
		case w.redis && spans[cmd].Parent().SpanID() != s.SpanContext().SpanID():
			t.Errorf("%s: the Redis command's span is not the decision's child", step)
		case !w.redis && cmd >= 0:
			t.Errorf("%s: a Redis command span, want none", step)
		}
	}

	check("first", want{true, "store", true, "closed"})
	check("denied by Redis", want{false, "store", true, "closed"})
	check("denied by the cache", want{false, "cache", false, "closed"})

	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	// A new key, so that the cache does not answer. The breaker opens
	// after enough failures (how many, and how soon, is policy's
	// business): decide until it does.
	lim2, _ := sluice.NewLimiter(h.store, algorithms.GCRA, core.PerHour(1))
	failedOpen := 0
	for deadline := time.Now().Add(10 * time.Second); breaker.State() != policy.Open; {
		if time.Now().After(deadline) {
			t.Fatalf("the circuit is still %v after %d failed calls", breaker.State(), failedOpen)
		}
		d, err := lim2.Allow(ctx, "user:2")
		if err != nil || d.Source != core.SourceFailOpen {
			t.Fatalf("Allow %d while down = %+v, %v; want fail-open", failedOpen, d, err)
		}
		failedOpen++
		time.Sleep(2 * time.Millisecond)
	}
	h.ended()
	check("open circuit", want{true, "fail-open", false, "open"})

	ms := h.collect(t)
	if got := value(t, ms, "ratelimit.decisions", telemetry.SourceKey.String("fail-open")); got != float64(failedOpen+1) {
		t.Errorf("fail-open decisions = %v, want %d", got, failedOpen+1)
	}
	if got := value(t, ms, "ratelimit.decisions", telemetry.SourceKey.String("cache")); got != 1 {
		t.Errorf("cache decisions = %v, want 1", got)
	}
	if got := value(t, ms, "ratelimit.breaker.state", telemetry.BreakerStateKey.String("open")); got != 1 {
		t.Errorf("breaker state open = %v, want 1", got)
	}
	if got := value(t, ms, "ratelimit.breaker.changes"); got != 1 {
		t.Errorf("breaker changes = %v, want 1", got)
	}
	if _, ok := ms["ratelimit.store.errors"]; ok {
		t.Error("store errors counted: the breaker answers for the store")
	}
}
