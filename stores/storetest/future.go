package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
)

// testFutureState checks a key whose state was last charged 10 s ahead of
// the store's clock, as a client whose clock runs fast leaves it: the
// requests on the store's clock that follow are decided at that charge,
// so no capacity comes back before the clock has caught up with it, and a
// denial changes nothing. No denial names an At before the charge, or an
// instant of passing (At plus RetryAfter) before the one the first look
// named: a store that answers from a cache (stores/layered) moves its
// cached denial's At on by its own clock, though the remote's stays at
// the charge, and one that leases waits for a whole batch.
func testFutureState(t *testing.T, s core.Store, alg core.Algorithm) {
	ctx := context.Background()
	req := core.Request{Key: newKey(t), Cost: 1, Terms: &core.Terms{Algorithm: alg, Limit: core.PerSecond(5)}}
	ahead := time.Now().Add(10 * time.Second).Truncate(time.Microsecond)
	charged := 0
	for {
		r := req.Clone()
		r.Now = ahead
		d, err := s.Apply(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			break
		}
		if charged++; charged > 5 {
			t.Fatalf("a limit of 5 a second admitted %d requests at one instant", charged)
		}
	}
	peek := func() core.Decision {
		t.Helper()
		r := req
		r.Op = core.OpPeek
		d, err := s.Apply(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	before := peek()
	if before.Allowed || !before.At.Equal(ahead) || before.RetryAfter <= 0 {
		t.Fatalf("a look on the store's clock at a key emptied 10 s ahead = %+v at %v; want denied, decided at the charge (%v)", before, before.At, ahead)
	}
	passes := ahead.Add(before.RetryAfter)
	for i := range 20 {
		d, err := s.Apply(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed || d.At.Before(ahead) || d.At.Add(d.RetryAfter).Before(passes) {
			t.Fatalf("request %d on the store's clock, the key emptied 10 s ahead = %+v at %v; want denied, at the charge (%v) or later, passing at %v or later",
				i+1, d, d.At, ahead, passes)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if after := peek(); after.Allowed || after.Remaining != before.Remaining || after.At.Before(ahead) || after.At.Add(after.RetryAfter).Before(passes) {
		t.Errorf("20 denials changed the key: a look gave %+v before and %+v after", before, after)
	}
}
