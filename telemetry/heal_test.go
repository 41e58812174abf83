package telemetry_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/redisstore"
	"github.com/sluicehq/sluice/telemetry"
)

// TestHealed overwrites sluice keys on a real server with another
// client's values: each decision that healed a key is counted in
// ratelimit.store.healed and its span gets a ratelimit.state_healed event,
// for one request and for a batch; an ordinary decision gets neither.
func TestHealed(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	pre := prefix()
	store, err := redisstore.New(client, redisstore.Config{Prefix: pre})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, store)
	ctx := context.Background()
	corrupt := func(key string, alg core.Algorithm) {
		t.Helper()
		if _, err := srv.Do("LPUSH", store.Key(key, alg), "x"); err != nil {
			t.Fatal(err)
		}
	}
	events := func(s sdktrace.ReadOnlySpan) (n int) {
		for _, e := range s.Events() {
			if e.Name == telemetry.HealedEventName {
				n++
			}
		}
		return n
	}

	req := core.Request{Key: "victim", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.GCRA, Limit: core.PerMinute(10)}}
	corrupt(req.Key, req.Algorithm)
	if d, err := h.store.Apply(ctx, req); err != nil || !d.Healed {
		t.Fatalf("Apply on a corrupted key = %+v, %v; want healed", d, err)
	}
	if n := events(h.onlySpan(t)); n != 1 {
		t.Errorf("the healing decision's span has %d %s events, want 1", n, telemetry.HealedEventName)
	}
	if d, err := h.store.Apply(ctx, req); err != nil || d.Healed {
		t.Fatalf("the next Apply = %+v, %v; want not healed", d, err)
	}
	if n := events(h.onlySpan(t)); n != 0 {
		t.Errorf("an ordinary decision's span has %d %s events, want 0", n, telemetry.HealedEventName)
	}

	reqs := []core.Request{
		{Key: "batch", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.TokenBucket, Limit: core.PerMinute(10)}},
		{Key: "batch", Cost: 1, Terms: &core.Terms{Algorithm: algorithms.FixedWindow, Limit: core.PerMinute(10)}},
	}
	corrupt("batch", reqs[0].Algorithm)
	corrupt("batch", reqs[1].Algorithm)
	out := make([]core.Decision, 2)
	if err := h.store.ApplyAll(ctx, reqs, out); err != nil || !out[0].Healed || !out[1].Healed {
		t.Fatalf("ApplyAll on corrupted keys = %+v, %v; want both healed", out, err)
	}
	if n := events(h.onlySpan(t)); n != 2 {
		t.Errorf("the healing batch's span has %d %s events, want 2", n, telemetry.HealedEventName)
	}

	ms := h.collect(t)
	for alg, want := range map[string]float64{"gcra": 1, "token-bucket": 1, "fixed-window": 1} {
		if got := value(t, ms, "ratelimit.store.healed", telemetry.AlgorithmKey.String(alg)); got != want {
			t.Errorf("ratelimit.store.healed{%s} = %v, want %v", alg, got, want)
		}
	}
}
