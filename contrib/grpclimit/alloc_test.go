package grpclimit_test

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/contrib/grpclimit"
	"github.com/sluicehq/sluice/core"
	"google.golang.org/grpc"
)

// TestAllowedAllocatesNothing checks that the unary interceptor, over a
// stack of one rule on the memory store, allocates nothing for a call it
// admits when its key needs none ([grpclimit.GlobalKey]): the call's
// verdict is its one decision. (Not parallel: AllocsPerRun counts every
// goroutine's allocations.)
func TestAllowedAllocatesNothing(t *testing.T) {
	stack := oneRule(t, newStore(t), algorithms.TokenBucket, core.PerSecond(1e9))
	in, err := grpclimit.New(stack, grpclimit.WithKeyFunc(grpclimit.GlobalKey))
	if err != nil {
		t.Fatal(err)
	}
	unary := in.Unary()
	ctx := context.Background()
	info := &grpc.UnaryServerInfo{FullMethod: "/grpc.health.v1.Health/Check"}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	if n := testing.AllocsPerRun(1000, func() {
		if _, err := unary(ctx, nil, info, handler); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("an admitted unary call by a global key: %v allocations, want 0", n)
	}
}
