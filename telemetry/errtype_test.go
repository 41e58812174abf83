package telemetry_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/telemetry"
)

// TestErrorTypeShared checks what ErrorType reads through the
// classification it shares with the stores: a reply without a code is
// "ERR" from either client, as is an ERR reply, whose "ERR " rueidis
// drops; a reply's code wins over the store's mark; an error the store
// marked, with no reply or network error in it, is "unavailable".
func TestErrorTypeShared(t *testing.T) {
	t.Parallel()
	addr := redistest.Shared(t).Addr()
	ctx := context.Background()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	gc := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { gc.Close() })
	script := "return redis.error_reply('user_script:1: oops')"
	rERR := rc.Do(ctx, rc.B().Eval().Script(script).Numkeys(0).Build()).Error()
	gERR := gc.Eval(ctx, script, nil).Err()
	noscript := gc.EvalSha(ctx, "0000000000000000000000000000000000000000", nil).Err()
	mark := func(err error) error { return fmt.Errorf("store: %w: %w", core.ErrUnavailable, err) }
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("rueidisstore: gcra: %w", rERR), "ERR"},
		{fmt.Errorf("redisstore: gcra: %w", gERR), "ERR"},
		{mark(noscript), "NOSCRIPT"},
		{mark(redis.ErrPoolTimeout), telemetry.ErrorTypeUnavailable},
		{redis.ErrPoolTimeout, "*errors.errorString"}, // unmarked: not the store's failure
	} {
		if got := telemetry.ErrorType(c.err); got != c.want {
			t.Errorf("ErrorType(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
