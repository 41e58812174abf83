package telemetry_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/telemetry"
)

// TestErrorTypeShared checks what ErrorType reads through the
// classification it shares with policy (core.Classify): a Redis reply as
// a store marks it (a core.StoreError) is its code, whether or not it
// means the store is unavailable; an error marked unavailable with no
// reply or network error in it is "unavailable"; a client's error that
// no store marked is read by OpenTelemetry's convention, its Go type:
// telemetry reads no client's errors.
func TestErrorTypeShared(t *testing.T) {
	t.Parallel()
	addr := redistest.Shared(t).Addr()
	ctx := context.Background()
	gc := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { gc.Close() })
	noscript := gc.EvalSha(ctx, "0000000000000000000000000000000000000000", nil).Err()
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("redisstore: gcra: %w", &core.StoreError{Type: "ERR", Err: errors.New("user_script:1: oops")}), "ERR"},
		{&core.StoreError{Type: "NOSCRIPT", Unavailable: true, Err: noscript}, "NOSCRIPT"},
		{&core.StoreError{Unavailable: true, Err: redis.ErrPoolTimeout}, telemetry.ErrorTypeUnavailable},
		{fmt.Errorf("store: %w: %w", core.ErrUnavailable, redis.ErrPoolTimeout), telemetry.ErrorTypeUnavailable},
		{redis.ErrPoolTimeout, "*errors.errorString"},                        // unmarked: not the store's failure
		{noscript, "github.com/redis/go-redis/v9/internal/proto.RedisError"}, // unmarked: no store's
	} {
		if got := telemetry.ErrorType(c.err); got != c.want {
			t.Errorf("ErrorType(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
